//! `vertex-veo`: Google Veo on Vertex AI (`{location}-aiplatform.googleapis.com`), as
//! docs/channels.md describes it with its sources.
//!
//! - Auth: a service account's key file; every call carries an OAuth 2.0 access token from
//!   the JWT bearer grant to the key's own `token_uri` ([`google_auth`]), kept until five
//!   minutes before it expires. A call answered 401 (the token expired or was revoked early)
//!   is made once more with a new token: the API refused it before doing anything.
//! - Submit: `POST /v1/projects/{project}/locations/{location}/publishers/google/models/
//!   {model}:predictLongRunning`, the body `{instances: [{prompt, image, lastFrame,
//!   referenceImages}], parameters: {aspectRatio, durationSeconds, resolution, sampleCount,
//!   seed, generateAudio, storageUri}}`, images inline as `{bytesBase64Encoded, mimeType}`.
//!   The answer names a long-running operation, the task's upstream id.
//! - Poll: `POST /v1/{the operation's model}:fetchPredictOperation` with `{operationName}`:
//!   once `done`, an `error` (a failure), `response.videos[]` (each `bytesBase64Encoded` or,
//!   with `storageUri`, a `gcsUri`), or none with `raiMediaFilteredCount` (the safety
//!   filters refused the video: `moderation_blocked`, refunded). Inline videos are decoded
//!   into a temp file as the answer arrives ([`spill`]).
//! - Result: a `gs://bucket/object` is fetched with the same token from the Cloud Storage
//!   JSON API (`{storage}/storage/v1/b/{bucket}/o/{object}?alt=media`).
//! - Channel test: a token, then `GET /v1/publishers/google/models/{model}`.
//!
//! [`google_auth`]: crate::vendors::google_auth
//! [`spill`]: crate::vendors::spill

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::client::{UpstreamError, UpstreamResponse};
use crate::vendors::common::{MAX_JSON_BYTES, ReadBlobError, Remote, path_part, poll_failure};
use crate::vendors::google_auth::{AccessToken, ServiceAccountKey, TokenError, TokenSource};
use crate::vendors::seam::{Need, Registration, Vendor, VendorSettings};
use crate::vendors::spill::Spill;
use crate::vendors::veo::{self, Image, Images, Instance, ReferenceImage, RpcStatus};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `vertex-veo` kind.
pub const REGISTRATION: Registration = Registration {
    kind: "vertex-veo",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::CredentialsFile, Need::Project, Need::Location],
    callbacks: false,
    status_words: false,
    models,
    build: |s, catalog| VertexVeo::new(s, catalog).map(|v| Box::new(v) as Box<dyn Vendor>),
};

/// The regional endpoint of the channel's `location` (`global`:
/// `https://aiplatform.googleapis.com`), see [`endpoint`].
pub const DEFAULT_BASE_URL: &str = "https://{location}-aiplatform.googleapis.com";

/// Where `gs://` results are read from, unless the channel sets `storage_base_url`.
pub const DEFAULT_STORAGE_BASE_URL: &str = "https://storage.googleapis.com";

/// The member whose value is a video's base64.
const INLINE_MEMBER: &str = "bytesBase64Encoded";

/// Largest video taken inline from a poll's answer (decoded), in bytes: 2 GiB.
pub const MAX_INLINE_VIDEO_BYTES: u64 = 2 << 30;

/// Largest error answer read (for the log only).
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// The Veo models Vertex AI documents and what each makes (docs/channels.md, with its
/// sources): Veo 3.x 4, 6 or 8 s at 720p or 1080p with sound, reference images (up to 3, at
/// 8 s) on Veo 3.1, a last frame on Veo 3.1 and Veo 2; Veo 2 5 to 8 s at 720p without sound;
/// 16:9 or 9:16 for all.
fn models() -> Vec<(&'static str, ModelCaps)> {
    let ratios = || vec!["16:9".to_owned(), "9:16".to_owned()];
    let veo3 = |last_frame: bool, reference_images: u32| ModelCaps {
        durations: vec![4, 6, 8],
        resolutions: vec!["720p".to_owned(), "1080p".to_owned()],
        ratios: ratios(),
        durations_by_resolution: BTreeMap::new(),
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
        ("veo-3.1-generate-001", veo3(true, 3)),
        ("veo-3.1-fast-generate-001", veo3(true, 0)),
        ("veo-3.1-generate-preview", veo3(true, 3)),
        ("veo-3.1-fast-generate-preview", veo3(true, 0)),
        ("veo-3.0-generate-001", veo3(false, 0)),
        ("veo-3.0-fast-generate-001", veo3(false, 0)),
        (
            "veo-2.0-generate-001",
            ModelCaps {
                durations: vec![5, 6, 7, 8],
                resolutions: vec!["720p".to_owned()],
                ratios: ratios(),
                last_frame: true,
                ..ModelCaps::default()
            },
        ),
    ]
}

/// The API's base for a channel's `base_url` and `location`: the default endpoint is the
/// location's own (`https://{location}-aiplatform.googleapis.com`, or
/// `https://aiplatform.googleapis.com` for `global`); a configured `base_url` is kept.
pub fn endpoint(base_url: &str, location: &str) -> String {
    if base_url != DEFAULT_BASE_URL {
        return base_url.trim_end_matches('/').to_owned();
    }
    if location == "global" {
        "https://aiplatform.googleapis.com".to_owned()
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    }
}

/// A channel's `location`: `global` or a region such as `us-central1` (it becomes part of a
/// host name, so nothing else is taken).
pub fn check_location(location: &str) -> Result<(), String> {
    let ok = !location.is_empty()
        && location.len() <= 63
        && location.starts_with(|c: char| c.is_ascii_lowercase())
        && !location.ends_with('-')
        && location
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "location {location:?} is not a Google Cloud location such as \"us-central1\" or \"global\""
        ))
    }
}

/// A channel's `project`: a project id (`my-project`, `example.com:my-project`) or number.
pub fn check_project(project: &str) -> Result<(), String> {
    let ok = !project.is_empty()
        && project.len() <= 100
        && project.starts_with(|c: char| c.is_ascii_alphanumeric())
        && project
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "project {project:?} is not a Google Cloud project id such as \"my-project\""
        ))
    }
}

/// A channel's `storage_uri`: `gs://bucket` or `gs://bucket/prefix/`.
pub fn check_storage_uri(uri: &str) -> Result<(), String> {
    match gcs_parts(uri) {
        Some(_) => Ok(()),
        None if uri.starts_with("gs://") && uri[5..].split('/').next().is_some_and(bucket_ok) => {
            Ok(())
        }
        None => Err(format!(
            "storage_uri {uri:?} is not a Cloud Storage location such as \"gs://bucket/videos/\""
        )),
    }
}

fn bucket_ok(bucket: &str) -> bool {
    (3..=222).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// `gs://bucket/object` as (bucket, object).
fn gcs_parts(uri: &str) -> Option<(&str, &str)> {
    let (bucket, object) = uri.strip_prefix("gs://")?.split_once('/')?;
    (bucket_ok(bucket) && !object.is_empty() && object.len() <= 1024).then_some((bucket, object))
}

/// The Cloud Storage JSON API's URL of a `gs://` object's bytes.
pub fn media_url(storage_base: &str, uri: &str) -> Option<String> {
    let (bucket, object) = gcs_parts(uri)?;
    Some(format!(
        "{}/storage/v1/b/{}/o/{}?alt=media",
        storage_base.trim_end_matches('/'),
        path_part(bucket),
        path_part(object)
    ))
}

pub struct VertexVeo {
    remote: Remote,
    auth: TokenSource,
    project: String,
    location: String,
    storage_uri: Option<String>,
    storage_base: String,
    /// The vendor models whose videos have sound (the catalog's `audio`): sent
    /// `generateAudio: true`, which Veo 3 requires and Veo 2 refuses.
    with_audio: BTreeSet<String>,
}

impl VertexVeo {
    fn new(s: VendorSettings, catalog: &BTreeMap<String, ModelCaps>) -> Result<VertexVeo, String> {
        let (Some(path), Some(project), Some(location)) =
            (s.kind.credentials_file, s.kind.project, s.kind.location)
        else {
            return Err("vertex-veo needs credentials_file, project and location".into());
        };
        check_project(&project)?;
        check_location(&location)?;
        if let Some(uri) = &s.kind.storage_uri {
            check_storage_uri(uri)?;
        }
        let key = ServiceAccountKey::read(&path)
            .map_err(|e| format!("credentials_file {}: {e}", path.display()))?;
        let mut remote = s.remote;
        remote.base_url = endpoint(&remote.base_url, &location);
        Ok(VertexVeo {
            remote: Remote::new(remote, s.blobs),
            auth: TokenSource::new(key),
            project,
            location,
            storage_uri: s.kind.storage_uri,
            storage_base: s
                .kind
                .storage_base_url
                .unwrap_or_else(|| DEFAULT_STORAGE_BASE_URL.to_owned()),
            with_audio: catalog
                .iter()
                .filter(|(_, caps)| caps.audio)
                .map(|(name, _)| name.clone())
                .collect(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The wire, as Vertex AI names it.

/// `POST ...:predictLongRunning`: the instance as the Gemini API's (`veo`), the parameters
/// with Vertex AI's own.
#[derive(Debug, Serialize, PartialEq)]
pub struct PredictLongRunningRequest {
    pub instances: Vec<Instance>,
    pub parameters: Parameters,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Parameters {
    /// `16:9` or `9:16`.
    pub aspect_ratio: String,
    pub duration_seconds: u32,
    /// `1080p`; left out for `720p`, the default (and Veo 2's only tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// Always 1: one task, one video.
    pub sample_count: u32,
    /// A uint32.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generate_audio: Option<bool>,
    /// `gs://bucket/prefix/`: the video is written there and answered as a `gcsUri`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_uri: Option<String>,
}

/// `POST ...:fetchPredictOperation`.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FetchPredictOperationRequest {
    pub operation_name: String,
}

/// A long-running operation (the submission's answer, and every poll's).
#[derive(Debug, Deserialize)]
pub struct Operation {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub done: Option<bool>,
    #[serde(default)]
    pub error: Option<RpcStatus>,
    #[serde(default)]
    pub response: Option<VideoResponse>,
}

/// `cloud.ai.large_models.vision.GenerateVideoResponse`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VideoResponse {
    #[serde(default)]
    pub videos: Vec<Video>,
    /// A number, or a string as proto3 JSON may write one.
    #[serde(default)]
    pub rai_media_filtered_count: Option<Value>,
    #[serde(default)]
    pub rai_media_filtered_reasons: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Video {
    #[serde(default)]
    pub gcs_uri: Option<String>,
    /// The video's bytes; in a poll's answer read by [`Spill`], `""` in their place.
    #[serde(default)]
    pub bytes_base64_encoded: Option<String>,
    #[serde(default)]
    pub mime_type: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Pure conversions.

/// What a channel adds to a job's request: sound where the model makes it, the storage
/// location where it has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    pub generate_audio: bool,
    pub storage_uri: Option<String>,
}

/// The submission body of `job` with its `images`.
pub fn to_vendor(job: &VideoJob, images: Images, options: &Options) -> PredictLongRunningRequest {
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
            sample_count: 1,
            seed: job.seed.and_then(|s| u32::try_from(s).ok()),
            generate_audio: options.generate_audio.then_some(true),
            storage_uri: options.storage_uri.clone(),
        },
    }
}

/// What a poll's operation says.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    Outcome(PollOutcome),
    /// Done, and the first video came inline (its bytes were decoded aside).
    Inline,
}

/// What a poll's operation says of the task.
pub fn from_vendor(op: Operation) -> Reading {
    if op.done != Some(true) {
        return Reading::Outcome(PollOutcome::Running {
            progress: 0,
            next_poll: None,
        });
    }
    if let Some(error) = op.error {
        return Reading::Outcome(operation_failed(&error));
    }
    let Some(answer) = op.response else {
        return Reading::Outcome(failed(
            "upstream_error",
            "the vendor finished without a video",
        ));
    };
    if let Some(video) = answer.videos.into_iter().next() {
        return match video {
            Video {
                gcs_uri: Some(uri), ..
            } if uri.starts_with("gs://") => {
                Reading::Outcome(PollOutcome::Succeeded(ResultFiles {
                    video: ResultSource::Url(uri),
                    thumbnail: None,
                    last_frame: None,
                    spritesheet: None,
                    usage: VendorUsage::NotReported,
                }))
            }
            Video {
                bytes_base64_encoded: Some(_),
                ..
            } => Reading::Inline,
            _ => Reading::Outcome(failed(
                "upstream_error",
                "the vendor's video has no address the relay fetches",
            )),
        };
    }
    let filtered = answer
        .rai_media_filtered_count
        .as_ref()
        .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
        .unwrap_or(0);
    if filtered > 0 {
        let reason = answer
            .rai_media_filtered_reasons
            .first()
            .map(|r| veo::truncate(r))
            .unwrap_or_else(|| "no reason given".to_owned());
        return Reading::Outcome(failed(
            "moderation_blocked",
            &format!("the vendor's safety filters refused the video: {reason}"),
        ));
    }
    Reading::Outcome(failed(
        "upstream_error",
        "the vendor finished without a video",
    ))
}

/// A done operation's `error`: gRPC code 3 (`INVALID_ARGUMENT`) citing safety or policy is a
/// refusal of the content; anything else the vendor's failure (its words to the log only).
fn operation_failed(error: &RpcStatus) -> PollOutcome {
    let message = error.message.as_deref().unwrap_or_default();
    if error.code == Some(3) && veo::mentions_safety(message) {
        return failed(
            "moderation_blocked",
            &format!("the vendor refused the content: {}", veo::truncate(message)),
        );
    }
    tracing::warn!(
        code = error.code,
        message = %crate::vendors::common::snippet(message.as_bytes()),
        "vertex-veo: an operation ended with an error"
    );
    failed("upstream_error", "the vendor failed the task")
}

fn failed(code: &str, message: &str) -> PollOutcome {
    PollOutcome::Failed {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

/// An operation name (`projects/{p}/locations/{l}/publishers/google/models/{m}/operations/
/// {id}`) as the path of its model (what `fetchPredictOperation` is called on), each segment
/// escaped; any other shape is none.
pub fn operation_model_path(name: &str) -> Option<String> {
    if name.len() > 1024 {
        return None;
    }
    let segments: Vec<&str> = name.split('/').collect();
    let [
        "projects",
        project,
        "locations",
        location,
        "publishers",
        publisher,
        "models",
        model,
        "operations",
        id,
    ] = segments.as_slice()
    else {
        return None;
    };
    let parts = [*project, *location, *publisher, *model, *id];
    if parts
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return None;
    }
    Some(format!(
        "/projects/{}/locations/{}/publishers/{}/models/{}",
        path_part(project),
        path_part(location),
        path_part(publisher),
        path_part(model)
    ))
}

/// A channel test's answer, read as the Gemini API's are (the same Google error bodies).
fn check_answer(status: StatusCode, body: &[u8]) -> Option<CheckVerdict> {
    if status == StatusCode::NOT_FOUND {
        return Some(CheckVerdict::Error);
    }
    veo::check_answer(status, body)
}

// ---------------------------------------------------------------------------------------
// The I/O.

/// A poll's answer read to its end: the operation, and the file its inline video went to.
struct PollAnswer {
    kept: Vec<u8>,
    file: Option<(PathBuf, u64)>,
}

impl VertexVeo {
    fn options(&self, model: &str) -> Options {
        Options {
            generate_audio: self.with_audio.contains(model),
            storage_uri: self.storage_uri.clone(),
        }
    }

    fn model_url(&self, model: &str, method: &str) -> String {
        self.remote.url(&format!(
            "/v1/projects/{}/locations/{}/publishers/google/models/{}:{method}",
            path_part(&self.project),
            path_part(&self.location),
            path_part(model)
        ))
    }

    async fn token(&self) -> Result<AccessToken, TokenError> {
        self.auth.token(&self.remote.http).await
    }

    async fn image(&self, blob: &str) -> Result<Image, ReadBlobError> {
        let (bytes, mime) = self.remote.read_blob(blob).await?;
        Ok(Image {
            bytes_base64_encoded: base64::engine::general_purpose::STANDARD.encode(bytes),
            mime_type: mime.to_owned(),
        })
    }

    /// The job's frames and reference images, inline.
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

    /// Sends a JSON `body` to `url` with a token; an answer of 401 makes it once more with a
    /// new token. `Ok` is the answer (the caller reads its body).
    async fn post(&self, url: &str, body: &Bytes) -> Result<UpstreamResponse, String> {
        for attempt in 0..2 {
            let token = self.token().await.map_err(|e| e.to_string())?;
            let req = self
                .remote
                .request(Method::POST, url, false)
                .header("authorization", token.bearer())
                .header("content-type", "application/json")
                .body(body.clone())
                .map_err(|e| format!("request: {e}"))?;
            let res = self
                .remote
                .http
                .send(req)
                .await
                .map_err(|e| e.to_string())?;
            if res.status == StatusCode::UNAUTHORIZED && attempt == 0 {
                drop(res);
                self.auth.forget(&token).await;
                continue;
            }
            return Ok(res);
        }
        Err("refused twice".into())
    }

    /// Reads a successful poll answer to its end, an inline video decoded into a temp file.
    async fn read_poll_answer(
        &self,
        mut body: crate::http::client::UpstreamBody,
    ) -> Result<PollAnswer, String> {
        use tokio::io::AsyncWriteExt;
        let mut spill = Spill::new(INLINE_MEMBER, MAX_JSON_BYTES);
        let mut out = Vec::new();
        let mut file: Option<(PathBuf, tokio::fs::File, u64)> = None;
        let result = async {
            while let Some(piece) = body.chunk().await.map_err(|e| e.to_string())? {
                spill.feed(&piece, &mut out).map_err(|e| e.to_string())?;
                if out.is_empty() {
                    continue;
                }
                if file.is_none() {
                    let path = self.remote.blobs.temp_path();
                    let f = tokio::fs::File::create(&path)
                        .await
                        .map_err(|e| format!("creating a temp file: {e}"))?;
                    file = Some((path, f, 0));
                }
                if let Some((_, f, written)) = file.as_mut() {
                    *written += out.len() as u64;
                    if *written > MAX_INLINE_VIDEO_BYTES {
                        return Err(format!(
                            "the inline video is larger than {MAX_INLINE_VIDEO_BYTES} bytes"
                        ));
                    }
                    f.write_all(&out)
                        .await
                        .map_err(|e| format!("writing a temp file: {e}"))?;
                }
                out.clear();
            }
            if let Some((_, f, _)) = file.as_mut() {
                f.sync_all()
                    .await
                    .map_err(|e| format!("writing a temp file: {e}"))?;
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => Ok(PollAnswer {
                kept: spill.finish(),
                file: file.map(|(path, _, written)| (path, written)),
            }),
            Err(e) => {
                if let Some((path, _, _)) = file {
                    let _ = tokio::fs::remove_file(&path).await;
                }
                Err(e)
            }
        }
    }
}

#[async_trait]
impl Vendor for VertexVeo {
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
                "vertex-veo takes no audio or video references; they are left out"
            );
        }
        let images = match self.images(job, references).await {
            Ok(images) => images,
            Err(e) => return SubmitOutcome::Fatal(format!("channel {name}: {e}")),
        };
        let body = match serde_json::to_vec(&to_vendor(job, images, &self.options(&job.model))) {
            Ok(body) => Bytes::from(body),
            Err(e) => return SubmitOutcome::Fatal(format!("channel {name}: {e}")),
        };
        let url = self.model_url(&job.model, "predictLongRunning");
        for attempt in 0..2 {
            let token = match self.token().await {
                Ok(token) => token,
                // The channel's credentials, not the request: the next channel may take it.
                Err(e) => return SubmitOutcome::Retry(format!("channel {name}: {e}")),
            };
            let req = self
                .remote
                .request(Method::POST, &url, false)
                .header("authorization", token.bearer())
                .header("content-type", "application/json")
                .body(body.clone());
            let mut unauthorized = false;
            let answer = self
                .remote
                .submit_exchange_with(req, |status, headers, body| {
                    unauthorized = status == StatusCode::UNAUTHORIZED;
                    match veo::submit_error(status, headers, body) {
                        SubmitOutcome::Retry(d) => {
                            SubmitOutcome::Retry(format!("channel {name}: {d}"))
                        }
                        SubmitOutcome::Fatal(d) => {
                            SubmitOutcome::Fatal(format!("channel {name}: {d}"))
                        }
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
                // Refused before anything was done: the same body once more, with a new token.
                Err(_) if unauthorized && attempt == 0 => {
                    self.auth.forget(&token).await;
                    continue;
                }
                Err(outcome) => return outcome,
            };
            return match serde_json::from_slice::<Operation>(&body) {
                Ok(Operation { name: Some(op), .. }) if operation_model_path(&op).is_some() => {
                    SubmitOutcome::Accepted { upstream_id: op }
                }
                _ => self.remote.without_id(&body),
            };
        }
        SubmitOutcome::Retry(format!("channel {name}: the token was refused twice"))
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let Some(path) = operation_model_path(upstream_id) else {
            return failed("upstream_error", "the vendor's operation name is unusable");
        };
        let request = FetchPredictOperationRequest {
            operation_name: upstream_id.to_owned(),
        };
        let body = match serde_json::to_vec(&request) {
            Ok(body) => Bytes::from(body),
            Err(e) => return PollOutcome::Transient(format!("channel {name}: {e}")),
        };
        let url = self.remote.url(&format!("/v1{path}:fetchPredictOperation"));
        let res = match self.post(&url, &body).await {
            Ok(res) => res,
            Err(e) => return PollOutcome::Transient(format!("channel {name}: poll: {e}")),
        };
        if !res.status.is_success() {
            let status = res.status;
            let headers = res.headers();
            let body = res.body.collect(MAX_ERROR_BYTES).await.unwrap_or_default();
            let answer: Result<_, UpstreamError> = Ok((status, headers, body));
            return poll_failure(name, &answer, |b| self.remote.log_text(b)).unwrap_or_else(|| {
                PollOutcome::Transient(format!("channel {name}: poll answered {status}"))
            });
        }
        let answer = match self.read_poll_answer(res.body).await {
            Ok(answer) => answer,
            Err(e) => return PollOutcome::Transient(format!("channel {name}: poll answer: {e}")),
        };
        let remove = |file: Option<(PathBuf, u64)>| async move {
            if let Some((path, _)) = file {
                let _ = tokio::fs::remove_file(&path).await;
            }
        };
        let op = match serde_json::from_slice::<Operation>(&answer.kept) {
            Ok(op) => op,
            Err(_) => {
                remove(answer.file).await;
                return PollOutcome::Unknown(format!(
                    "channel {name}: unreadable poll answer: {}",
                    self.remote.log_text(&answer.kept)
                ));
            }
        };
        match (from_vendor(op), answer.file) {
            (Reading::Inline, Some((path, written))) if written > 0 => {
                PollOutcome::Succeeded(ResultFiles {
                    video: ResultSource::LocalFile(path),
                    thumbnail: None,
                    last_frame: None,
                    spritesheet: None,
                    usage: VendorUsage::NotReported,
                })
            }
            (Reading::Inline, file) => {
                remove(file).await;
                failed("upstream_error", "the vendor's inline video is empty")
            }
            (Reading::Outcome(outcome), file) => {
                remove(file).await;
                outcome
            }
        }
    }

    /// A `gs://` result through the Cloud Storage JSON API with the channel's token (a 401
    /// once more with a new one); any other URL as every vendor downloads it.
    async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        let Some(media) = media_url(&self.storage_base, url) else {
            return self.remote.download(url).await;
        };
        for attempt in 0..2 {
            let token = match self.token().await {
                Ok(token) => token,
                Err(TokenError::Refused(d)) => return Err(UpstreamError::Build(d)),
                Err(TokenError::Unavailable(d)) => {
                    return Err(UpstreamError::Send {
                        url: media,
                        message: d,
                        unsent: true,
                    });
                }
            };
            let req = self
                .remote
                .request(Method::GET, &media, false)
                .header("authorization", token.bearer())
                .body(Bytes::new())
                .map_err(|e| UpstreamError::Build(e.to_string()))?;
            let res = self.remote.http.send(req).await?;
            if res.status == StatusCode::UNAUTHORIZED && attempt == 0 {
                drop(res);
                self.auth.forget(&token).await;
                continue;
            }
            return Ok(res);
        }
        Err(UpstreamError::Build(
            "the storage refused the token twice".into(),
        ))
    }

    /// A token (the key accepted), then the model's publisher record
    /// (`publishers.models.get`): authenticated, generating and costing nothing.
    async fn check(&self) -> ChannelCheck {
        let token = match self.token().await {
            Ok(token) => token,
            Err(e @ TokenError::Refused(_)) => {
                return ChannelCheck {
                    verdict: CheckVerdict::KeyRefused,
                    detail: e.to_string(),
                };
            }
            Err(e @ TokenError::Unavailable(_)) => {
                return ChannelCheck {
                    verdict: CheckVerdict::Unreachable,
                    detail: e.to_string(),
                };
            }
        };
        let settings = &self.remote.settings;
        let model = settings
            .models
            .iter()
            .find_map(|m| settings.model_map.get(m))
            .or(settings.models.first())
            .cloned()
            .unwrap_or_else(|| "veo-3.0-generate-001".to_owned());
        let url = self.remote.url(&format!(
            "/v1/publishers/google/models/{}",
            path_part(&model)
        ));
        let req = self
            .remote
            .request(Method::GET, &url, false)
            .header("authorization", token.bearer())
            .body(Bytes::new());
        self.remote.check_request(req, check_answer).await
    }
}

#[cfg(test)]
mod tests;
