//! The first format: `/v1/videos` (CONTRACT §1).

use std::sync::Arc;

use bytes::Bytes;
use channels::{ReferenceRole, SimDirectives, StoredReference, VideoJob};
use error_codes::{ApiError, ErrorCode};
use fetch::{FetchError, Format, MediaKind};
use http::{HeaderMap, StatusCode};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use serde_json::json;
use store::{LedgerDraft, LedgerKind, Outputs, Task, TaskKind, TaskStatus};
use tokio::io::AsyncWriteExt;
use videos_v1::{
    Media, Ratio, RawCreate, ValidCreate, Variant, VideoError, VideoList, VideoObject, VideoStatus,
};

use crate::app::{App, now_ms};
use crate::config::ContentMode;
use crate::content::serve_blob;
use crate::http::{Answer, error, media_type, ok, parse_json, read_body};
use crate::multipart::{self, Uploads};
use crate::tasks;

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
}

pub fn params(task: &Task) -> Result<V1Params, ApiError> {
    task.params.read().map_err(|e| {
        tracing::error!("task {}: unreadable params: {e}", task.id);
        ApiError::new(ErrorCode::Unavailable, "the task record cannot be read")
    })
}

pub fn status_of(status: TaskStatus) -> VideoStatus {
    match status {
        TaskStatus::Queued => VideoStatus::Queued,
        TaskStatus::Running => VideoStatus::InProgress,
        TaskStatus::Succeeded => VideoStatus::Completed,
        TaskStatus::Failed => VideoStatus::Failed,
        TaskStatus::Cancelled => VideoStatus::Cancelled,
    }
}

/// The task record as clients see it (CONTRACT §1.2).
pub fn record(task: &Task) -> Result<VideoObject, ApiError> {
    let p = params(task)?;
    Ok(VideoObject {
        id: task.id.clone(),
        task_id: task.id.clone(),
        object: "video".into(),
        model: task.model.clone(),
        status: status_of(task.status),
        progress: task.progress,
        prompt: p.prompt,
        size: format!("{}x{}", p.width, p.height),
        aspect_ratio: p.aspect_ratio,
        duration: p.duration,
        seconds: p.duration.to_string(),
        created_at: task.created_at,
        completed_at: task.completed_at,
        expires_at: task.expires_at,
        error: task.error.as_ref().map(|e| VideoError {
            code: e.code.clone(),
            message: e.message.clone(),
        }),
        warnings: task.warnings.clone(),
        remixed_from_video_id: None,
    })
}

/// The job the channel runs for a first-format task.
pub fn job(task: &Task, upstream_model: String) -> Result<VideoJob, ApiError> {
    let p = params(task)?;
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

/// The relay's copies of a first-format task's audio and video references, for the channel
/// (the video first, as the `ark` content array lists URL references too); the engine adds
/// their signed URLs.
pub fn references(task: &Task) -> Result<Vec<StoredReference>, ApiError> {
    let p = params(task)?;
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

fn answer(task: &Task) -> Answer {
    match record(task) {
        Ok(record) => ok(&record),
        Err(e) => error(&e),
    }
}

/// `POST /v1/videos`.
pub async fn create(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    body: Incoming,
) -> Answer {
    match create_inner(app, key, headers, body).await {
        Ok(task) => answer(&task),
        Err(e) => error(&e),
    }
}

async fn create_inner(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Task, ApiError> {
    // Parse: JSON or multipart (the OpenAI SDK always sends multipart).
    let (raw, mut uploads) = match media_type(headers).as_deref() {
        Some("application/json") => {
            let bytes = read_body(body, app.config.server.json_limit()).await?;
            (
                RawCreate::from_json(parse_json(&bytes)?)?,
                Uploads::default(),
            )
        }
        Some("multipart/form-data") => {
            let content_type = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let limits = multipart::Limits {
                body: app.config.server.upload_limit(),
                text: app.config.server.max_body_bytes,
                long_text: &videos_v1::REFERENCE_FIELDS,
            };
            let (fields, uploads) = multipart::read(body, content_type, limits, &app.blobs).await?;
            (RawCreate { fields }, uploads)
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!(
                    "POST /v1/videos takes application/json or multipart/form-data, got {}",
                    other.unwrap_or("no Content-Type")
                ),
            ));
        }
    };
    let mut valid = videos_v1::validate(&raw)?;
    let first_frame_param = videos_v1::first_frame_param(&raw);
    // A `data:` URI is in `valid` now; the request's own copy of it goes.
    drop(raw);
    if !crate::auth::may_use_model(key, &valid.model) {
        return Err(ApiError::field(
            ErrorCode::InvalidModel,
            "model",
            format!("this key may not use model {}", valid.model),
        ));
    }
    let sim = sim_directives(app, headers)?;
    let channel = app.video_channel_for(&valid.model).ok_or_else(|| {
        ApiError::new(
            ErrorCode::Unavailable,
            format!("no channel serves model {} now", valid.model),
        )
    })?;
    let _ = channel;

    // I/O checks, in the contract's order: images, audio, video.
    let first = match &valid.first_frame {
        Some(m) => Some(image(app, m, first_frame_param, &uploads).await?),
        None => None,
    };
    let last = match &valid.last_frame {
        Some(m) => Some(image(app, m, "last_frame", &uploads).await?),
        None => None,
    };
    // Taken out of `valid`: a `data:` URI's text goes once it is decoded to a file.
    let audio = match valid.audio.take() {
        Some(m) => Some(reference(app, m, MediaKind::Audio, "audio_url", &mut uploads).await?),
        None => None,
    };
    let video = match valid.reference_video.take() {
        Some(m) => {
            let field = "reference_video";
            Some(reference(app, m, MediaKind::Video, field, &mut uploads).await?)
        }
        None => None,
    };

    let first_dims = first.as_ref().and_then(|f| f.dims);
    let framing = videos_v1::resolve_framing(valid.size, valid.aspect_ratio, first_dims);
    let mut warnings = Vec::new();
    if let (Some(f), Some(l)) = (
        first.as_ref().and_then(|f| f.dims),
        last.as_ref().and_then(|l| l.dims),
    ) {
        warnings.extend(videos_v1::frame_ratio_warning(f, l));
    }

    let model = app.config.model(&valid.model).ok_or_else(|| {
        ApiError::field(
            ErrorCode::InvalidModel,
            "model",
            "the model is not in the catalog",
        )
    })?;
    let price = model.price_per_second(None).unwrap_or(0) as i64 * i64::from(valid.duration);

    let id = format!("video_{}", ulid::Ulid::new());
    // Store the frames and references under the task before the task exists: a refused creation
    // removes them.
    let mut stored = StoredFiles::new(app.blobs.clone(), &id);
    let first_frame = match first {
        Some(f) => Some(stored.keep(f, "first_frame", &valid.first_frame, &mut uploads)?),
        None => None,
    };
    let last_frame = match last {
        Some(f) => Some(stored.keep(f, "last_frame", &valid.last_frame, &mut uploads)?),
        None => None,
    };
    let (audio, audio_blob) = stored.keep_reference(audio, "audio", &mut uploads).await?;
    let (reference_video, reference_video_blob) = stored
        .keep_reference(video, "reference_video", &mut uploads)
        .await?;
    let params = V1Params {
        prompt: valid.prompt.clone(),
        width: framing.width,
        height: framing.height,
        aspect_ratio: framing.ratio,
        duration: valid.duration,
        first_frame,
        last_frame,
        audio,
        reference_video,
        audio_blob,
        reference_video_blob,
        reference_video_audio: valid.reference_video_audio,
        sim: sim.clone(),
    };
    let task = new_task(
        app,
        key,
        &id,
        TaskKind::Video,
        &valid,
        params,
        warnings,
        price,
        sim,
    )?;
    tasks::create(app, &task, key, price).await?;
    stored.keep_all();
    Ok(task)
}

#[allow(clippy::too_many_arguments)]
fn new_task(
    app: &App,
    key: &store::Key,
    id: &str,
    kind: TaskKind,
    valid: &ValidCreate,
    params: V1Params,
    warnings: Vec<String>,
    price: i64,
    sim: SimDirectives,
) -> Result<Task, ApiError> {
    let now = now_ms();
    let params = store::Params::new(&params)
        .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("task params: {e}")))?;
    Ok(Task {
        id: id.to_owned(),
        kind,
        owner: key.id.clone(),
        model: valid.model.clone(),
        status: TaskStatus::Queued,
        progress: 0,
        created_at: now / 1000,
        updated_at: now / 1000,
        completed_at: None,
        expires_at: None,
        deadline_ms: now + app.config.tasks.timeout_secs * 1000,
        next_poll_ms: Some(now),
        params,
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        attempts: 0,
        sim: (!sim.is_empty()).then(|| serde_json::to_string(&sim).unwrap_or_default()),
        outputs: Outputs::default(),
        error: None,
        warnings,
        price,
    })
}

/// The `x-relay-sim` header, when the simulator honours it.
pub fn sim_directives(app: &App, headers: &HeaderMap) -> Result<SimDirectives, ApiError> {
    let Some(value) = headers.get("x-relay-sim") else {
        return Ok(SimDirectives::default());
    };
    if !app.sim_scenarios() {
        return Ok(SimDirectives::default());
    }
    let value = value.to_str().unwrap_or_default();
    SimDirectives::parse(value)
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "x-relay-sim", e))
}

/// A checked image: its bytes, its format and its dimensions.
pub struct CheckedMedia {
    pub bytes: Option<Bytes>,
    pub format: Format,
    pub dims: Option<(u32, u32)>,
}

fn kind_error(kind: MediaKind) -> (ErrorCode, &'static str) {
    match kind {
        MediaKind::Image => (ErrorCode::InvalidImage, "jpeg, png or webp"),
        MediaKind::Audio => (ErrorCode::InvalidAudio, "mp3, wav or m4a"),
        MediaKind::Video => (ErrorCode::InvalidVideo, "mp4 or mov"),
    }
}

/// The field's own error (CONTRACT §1.1), its detail naming the field and what it accepts.
fn field_error(kind: MediaKind, field: &str, why: &str) -> ApiError {
    let (code, accepted) = kind_error(kind);
    ApiError::field(code, field, format!("{field} {why}; accepted: {accepted}"))
}

/// The format of a reference of `kind` by its first bytes.
fn sniffed(prefix: &[u8], kind: MediaKind) -> Option<Format> {
    fetch::sniff(prefix).filter(|f| f.kind() == kind)
}

/// Fetches (or reads) an image reference and sniffs it (CONTRACT §1.1: unreachable or of the
/// wrong format is the field's own error). Images are read whole, at most `max_image_bytes`.
pub async fn image(
    app: &App,
    media: &Media,
    field: &str,
    uploads: &Uploads,
) -> Result<CheckedMedia, ApiError> {
    let max_image = app.config.security.max_image_bytes;
    let fail = |why: String| field_error(MediaKind::Image, field, &why);
    let (bytes, whole) = match media {
        Media::Url(url) => {
            let bytes = app
                .fetcher
                .fetch(url, max_image)
                .await
                .map_err(|e| fail(format!("could not be fetched: {e}")))?;
            (bytes, true)
        }
        Media::DataUri(uri) => {
            let bytes = fetch::decode_data_uri(uri, max_image)
                .map_err(|e| fail(format!("is not a usable data: URI: {e}")))?;
            (Bytes::from(bytes), true)
        }
        Media::File(index) => {
            let upload = uploads
                .0
                .get(*index)
                .ok_or_else(|| fail("upload is missing".into()))?;
            if upload.len > max_image {
                return Err(fail(format!("is larger than {max_image} bytes")));
            }
            (upload.prefix.clone(), false)
        }
    };
    let format = sniffed(&bytes, MediaKind::Image)
        .ok_or_else(|| fail("is not in a supported format".into()))?;
    let dims =
        fetch::image_dimensions(&bytes).ok_or_else(|| fail("has no readable dimensions".into()))?;
    Ok(CheckedMedia {
        bytes: whole.then_some(bytes),
        format,
        dims: Some(dims),
    })
}

/// A checked audio or video reference: a URL the upstream fetches itself, or an upload (a file
/// part, or a decoded `data:` URI) that becomes the relay's copy.
pub enum CheckedReference {
    Url(String),
    Upload { index: usize, format: Format },
}

/// Checks an audio or video reference (CONTRACT §1.1: unreachable or of the wrong format is
/// the field's own error). A URL's first 64 KiB are fetched to sniff it; a file part is
/// sniffed from the start it was streamed to disk with (it is at most `max_upload_bytes`,
/// with the whole body); a `data:` URI (at most `max_body_bytes` decoded, as the body that
/// carried it) is decoded to a temporary file.
async fn reference(
    app: &App,
    media: Media,
    kind: MediaKind,
    field: &str,
    uploads: &mut Uploads,
) -> Result<CheckedReference, ApiError> {
    let fail = |why: String| field_error(kind, field, &why);
    let index = match media {
        Media::Url(url) => {
            let prefix = app
                .fetcher
                .fetch_prefix(&url, multipart::PREFIX_BYTES)
                .await
                .map_err(|e| fail(format!("could not be fetched: {e}")))?;
            sniffed(&prefix, kind).ok_or_else(|| fail("is not in a supported format".into()))?;
            return Ok(CheckedReference::Url(url));
        }
        Media::DataUri(uri) => data_uri_upload(app, &uri, kind, field, uploads).await?,
        Media::File(index) => index,
    };
    let upload = uploads
        .0
        .get(index)
        .ok_or_else(|| fail("upload is missing".into()))?;
    let format =
        sniffed(&upload.prefix, kind).ok_or_else(|| fail("is not in a supported format".into()))?;
    Ok(CheckedReference::Upload { index, format })
}

/// Decodes a `data:` URI reference into a new upload, a chunk at a time: its start is sniffed
/// before anything is written, and no more than that start and one chunk is held decoded.
async fn data_uri_upload(
    app: &App,
    uri: &str,
    kind: MediaKind,
    field: &str,
    uploads: &mut Uploads,
) -> Result<usize, ApiError> {
    let max = app.config.server.max_body_bytes;
    let unusable = |e: FetchError| match e {
        FetchError::TooLarge => field_error(kind, field, &format!("is larger than {max} bytes")),
        e => field_error(kind, field, &format!("is not a usable data: URI: {e}")),
    };
    let mut decoder = fetch::DataUriDecoder::new(uri, max).map_err(unusable)?;
    let mut head = Vec::new();
    while head.len() < multipart::PREFIX_BYTES
        && let Some(chunk) = decoder.next_chunk().map_err(unusable)?
    {
        head.extend_from_slice(&chunk);
    }
    if sniffed(&head, kind).is_none() {
        return Err(field_error(kind, field, "is not in a supported format"));
    }
    let io = |e: std::io::Error| {
        tracing::error!("writing the {field} reference: {e}");
        ApiError::new(
            ErrorCode::Unavailable,
            format!("the {field} reference could not be stored"),
        )
    };
    let (index, path) = uploads.begin(&*app.blobs);
    let mut file = tokio::fs::File::create(&path).await.map_err(io)?;
    file.write_all(&head).await.map_err(io)?;
    let mut len = head.len() as u64;
    while let Some(chunk) = decoder.next_chunk().map_err(unusable)? {
        file.write_all(&chunk).await.map_err(io)?;
        len += chunk.len() as u64;
    }
    file.flush().await.map_err(io)?;
    head.truncate(multipart::PREFIX_BYTES);
    uploads.finish(index, Bytes::from(head), len);
    Ok(index)
}

/// Files written for a task being created (frames, audio and video references); removed again
/// unless the task was stored.
struct StoredFiles {
    blobs: Arc<dyn store::BlobStore>,
    ids: Vec<String>,
    prefix: String,
}

impl StoredFiles {
    fn new(blobs: Arc<dyn store::BlobStore>, task_id: &str) -> StoredFiles {
        StoredFiles {
            blobs,
            ids: Vec::new(),
            prefix: task_id.to_owned(),
        }
    }

    fn keep(
        &mut self,
        media: CheckedMedia,
        name: &str,
        source: &Option<Media>,
        uploads: &mut Uploads,
    ) -> Result<String, ApiError> {
        let id = format!("{}/{name}.{}", self.prefix, media.format.as_str());
        let written = match (source, media.bytes) {
            (Some(Media::File(index)), _) => uploads.commit(*index, &*self.blobs, &id),
            (_, Some(bytes)) => self.blobs.put_bytes(&id, &bytes),
            (_, None) => Err(std::io::Error::other("no bytes")),
        };
        written.map_err(|e| {
            tracing::error!("storing {id}: {e}");
            ApiError::new(ErrorCode::Unavailable, "the image could not be stored")
        })?;
        self.ids.push(id.clone());
        Ok(id)
    }

    /// Keeps a checked audio or video reference: a URL as it is, an upload as the blob
    /// `<task>/<name>.<format>`. Answers (URL, blob id).
    async fn keep_reference(
        &mut self,
        reference: Option<CheckedReference>,
        name: &str,
        uploads: &mut Uploads,
    ) -> Result<(Option<String>, Option<String>), ApiError> {
        let (index, format) = match reference {
            None => return Ok((None, None)),
            Some(CheckedReference::Url(url)) => return Ok((Some(url), None)),
            Some(CheckedReference::Upload { index, format }) => (index, format),
        };
        let id = format!("{}/{name}.{}", self.prefix, format.as_str());
        // The long part of storing a large file (syncing it) on a blocking thread; the
        // commit itself is then a rename.
        let committed = match uploads.sync(index).await {
            Ok(()) => uploads.commit(index, &*self.blobs, &id),
            Err(e) => Err(e),
        };
        committed.map_err(|e| {
            tracing::error!("storing {id}: {e}");
            ApiError::new(
                ErrorCode::Unavailable,
                format!("the {name} reference could not be stored"),
            )
        })?;
        self.ids.push(id);
        Ok((None, self.ids.last().cloned()))
    }

    fn keep_all(mut self) {
        self.ids.clear();
    }
}

impl Drop for StoredFiles {
    fn drop(&mut self) {
        for id in &self.ids {
            let _ = self.blobs.delete(id);
        }
    }
}

/// `GET /v1/videos/{id}`.
pub async fn get(app: &Arc<App>, key: &store::Key, id: &str) -> Answer {
    match tasks::owned(app, key, id, TaskKind::Video).await {
        Ok(task) => {
            let mut res = answer(&task);
            tasks::poll_after_header(&task, &mut res);
            res
        }
        Err(e) => error(&e),
    }
}

/// `GET /v1/videos`.
pub async fn list(app: &Arc<App>, key: &store::Key, query: Option<&str>) -> Answer {
    let page = match tasks::list_page(app, key, TaskKind::Video, query).await {
        Ok(page) => page,
        Err(e) => return error(&e),
    };
    let mut data = Vec::with_capacity(page.items.len());
    for task in &page.items {
        match record(task) {
            Ok(r) => data.push(r),
            Err(e) => return error(&e),
        }
    }
    ok(&VideoList::new(data, page.has_more))
}

/// `GET /v1/videos/{id}/content`.
pub async fn content(
    app: &Arc<App>,
    key: &store::Key,
    id: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Answer {
    let variant = match videos_v1::parse_content_query(query) {
        Ok(v) => v,
        Err(e) => return error(&e),
    };
    let task = match tasks::owned(app, key, id, TaskKind::Video).await {
        Ok(task) => task,
        Err(e) => return error(&e),
    };
    if task.status != TaskStatus::Succeeded {
        return error(&ApiError::new(
            ErrorCode::TaskNotCompleted,
            format!(
                "task {id} is {}, not completed",
                status_of(task.status).as_str()
            ),
        ));
    }
    if task
        .expires_at
        .is_some_and(|at| at <= crate::app::now_secs())
    {
        return error(&ApiError::new(
            ErrorCode::NotFound,
            format!("the content of task {id} has expired"),
        ));
    }
    let blob = match variant {
        Variant::Video => task.outputs.video.as_deref(),
        Variant::Thumbnail => task.outputs.thumbnail.as_deref(),
    };
    // Stored under their sniffed type's extension (a JPEG thumbnail from an upstream is .jpg).
    let content_type = blob.map_or("application/octet-stream", crate::signed::content_type);
    match blob {
        Some(blob) if app.config.server.content_mode == ContentMode::Redirect => {
            let expires = crate::app::now_secs() + app.config.server.signed_url_ttl_secs;
            let url = app.signer.url(&app.public_base_url(), blob, expires);
            let mut res = crate::http::json(StatusCode::FOUND, &json!({"url": url}));
            if let Ok(location) = http::HeaderValue::from_str(&url) {
                res.headers_mut().insert(http::header::LOCATION, location);
            }
            res
        }
        Some(blob) => serve_blob(&app.blobs, blob, content_type, headers).await,
        None => error(&ApiError::new(
            ErrorCode::NotFound,
            "the task has no such content",
        )),
    }
}

/// `POST /v1/videos/{id}/cancel`.
pub async fn cancel(app: &Arc<App>, key: &store::Key, id: &str) -> Answer {
    match tasks::cancel(app, key, id, TaskKind::Video).await {
        Ok(task) => answer(&task),
        Err(e) => error(&e),
    }
}

/// `DELETE /v1/videos/{id}`.
pub async fn delete(app: &Arc<App>, key: &store::Key, id: &str) -> Answer {
    match tasks::delete(app, key, id, TaskKind::Video).await {
        Ok(()) => crate::http::json(
            StatusCode::OK,
            &json!({"id": id, "object": "video.deleted", "deleted": true}),
        ),
        Err(e) => error(&e),
    }
}

/// The ledger draft of a pre-deduction.
pub fn prededuct(key: &store::Key, task_id: &str, price: i64) -> Vec<LedgerDraft> {
    if price <= 0 {
        return Vec::new();
    }
    vec![LedgerDraft {
        key_id: key.id.clone(),
        task_id: task_id.to_owned(),
        kind: LedgerKind::Prededuct,
        amount: -price,
    }]
}
