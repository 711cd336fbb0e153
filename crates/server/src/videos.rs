//! The first format: `/v1/videos` (CONTRACT §1).

use std::sync::Arc;

use bytes::Bytes;
use channels::{SimDirectives, VideoJob};
use error_codes::{ApiError, ErrorCode};
use fetch::{Format, MediaKind};
use http::{HeaderMap, StatusCode};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use serde_json::json;
use store::{LedgerDraft, LedgerKind, Outputs, Task, TaskKind, TaskStatus};
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
    /// URL of the audio reference (or `blob:<id>` for an inline one).
    pub audio: Option<String>,
    pub reference_video: Option<String>,
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
            let (fields, uploads) = multipart::read(
                body,
                content_type,
                app.config.server.upload_limit(),
                &app.blobs,
            )
            .await?;
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
    let valid = videos_v1::validate(&raw)?;
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
        Some(m) => Some(
            media(
                app,
                m,
                MediaKind::Image,
                videos_v1::first_frame_param(&raw),
                &uploads,
            )
            .await?,
        ),
        None => None,
    };
    let last = match &valid.last_frame {
        Some(m) => Some(media(app, m, MediaKind::Image, "last_frame", &uploads).await?),
        None => None,
    };
    if let Some(m) = &valid.audio {
        media(app, m, MediaKind::Audio, "audio_url", &uploads).await?;
    }
    if let Some(m) = &valid.reference_video {
        media(app, m, MediaKind::Video, "reference_video", &uploads).await?;
    }

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
    // Store the frames under the task before the task exists: a refused creation removes them.
    let mut stored = StoredFrames::new(app.blobs.clone(), &id);
    let first_frame = match first {
        Some(f) => Some(stored.keep(f, "first_frame", &valid.first_frame, &mut uploads)?),
        None => None,
    };
    let last_frame = match last {
        Some(f) => Some(stored.keep(f, "last_frame", &valid.last_frame, &mut uploads)?),
        None => None,
    };
    let params = V1Params {
        prompt: valid.prompt.clone(),
        width: framing.width,
        height: framing.height,
        aspect_ratio: framing.ratio,
        duration: valid.duration,
        first_frame,
        last_frame,
        audio: reference_url(&valid.audio),
        reference_video: reference_url(&valid.reference_video),
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

/// Only URLs are kept as references; inline ones were checked and are not forwarded.
fn reference_url(media: &Option<Media>) -> Option<String> {
    match media {
        Some(Media::Url(url)) => Some(url.clone()),
        _ => None,
    }
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

/// A checked reference: its bytes when they are needed (images), its format and size.
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

/// Fetches (or reads) a reference and sniffs it (CONTRACT §1.1: unreachable or of the wrong
/// format is the field's own error).
pub async fn media(
    app: &App,
    media: &Media,
    kind: MediaKind,
    field: &str,
    uploads: &Uploads,
) -> Result<CheckedMedia, ApiError> {
    let (code, accepted) = kind_error(kind);
    let max_image = app.config.security.max_image_bytes;
    let fail =
        |why: String| ApiError::field(code, field, format!("{field} {why}; accepted: {accepted}"));
    let (bytes, whole) = match media {
        Media::Url(url) => {
            let got = if kind == MediaKind::Image {
                app.fetcher.fetch(url, max_image).await
            } else {
                app.fetcher.fetch_prefix(url, multipart::PREFIX_BYTES).await
            };
            let bytes = got.map_err(|e| fail(format!("could not be fetched: {e}")))?;
            (bytes, kind == MediaKind::Image)
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
            if kind == MediaKind::Image && upload.len > max_image {
                return Err(fail(format!("is larger than {max_image} bytes")));
            }
            (upload.prefix.clone(), false)
        }
    };
    let format = fetch::sniff(&bytes)
        .filter(|f| f.kind() == kind)
        .ok_or_else(|| fail("is not in a supported format".into()))?;
    let dims = if kind == MediaKind::Image {
        Some(
            fetch::image_dimensions(&bytes)
                .ok_or_else(|| fail("has no readable dimensions".into()))?,
        )
    } else {
        None
    };
    Ok(CheckedMedia {
        bytes: whole.then_some(bytes),
        format,
        dims,
    })
}

/// Frames written for a task being created; removed again unless the task was stored.
struct StoredFrames {
    blobs: Arc<dyn store::BlobStore>,
    ids: Vec<String>,
    prefix: String,
}

impl StoredFrames {
    fn new(blobs: Arc<dyn store::BlobStore>, task_id: &str) -> StoredFrames {
        StoredFrames {
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

    fn keep_all(mut self) {
        self.ids.clear();
    }
}

impl Drop for StoredFrames {
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
