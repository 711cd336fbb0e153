//! The first format: `/v1/videos` (CONTRACT §1).

mod media;

use std::sync::Arc;

use engine::formats::read_params;
use engine::formats::video::{Given, V1Params, demand_of};
use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use fetch::MediaKind;
use http::{HeaderMap, StatusCode};
use serde_json::json;
use store::{Task, TaskKind, TaskStatus};
use videos_v1::{FieldValue, RawCreate, Variant, VideoError, VideoList, VideoObject, VideoStatus};

use crate::app::App;
use crate::config::ContentMode;
use crate::formats::idempotency::{Hashed, Idem};
use crate::formats::tasks::{self, TaskFormat, unreadable};
use crate::ground::content::{self, serve_blob};
use crate::ground::http::{Answer, error, media_type, parse_json, read_body};
use crate::ground::multipart::{self, Uploads};
use media::{StoredFiles, image, reference};

/// The first format as the shared task handlers see it.
pub struct Videos;

impl TaskFormat for Videos {
    const KIND: TaskKind = TaskKind::Video;
    const STABLE: bool = true;
    type Record = VideoObject;
    type List = VideoList;

    /// The task record as clients see it (CONTRACT §1.2).
    fn record(_: &App, task: &Task) -> Result<VideoObject, ApiError> {
        let p: V1Params = read_params(task).map_err(unreadable)?;
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
            remixed_from_video_id: p.remixed_from,
            edited_from_video_id: p.edited_from,
            extended_from_video_id: p.extended_from,
        })
    }

    fn list(data: Vec<VideoObject>, has_more: bool) -> VideoList {
        VideoList::new(data, has_more)
    }
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

/// `POST /v1/videos`: the new task (its answer: `tasks::created`).
pub async fn create(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    body: Hashed,
    idem: &mut Idem,
) -> Result<Task, ApiError> {
    let (raw, uploads) = read_request(app, headers, body, "POST /v1/videos").await?;
    create_from(app, key, headers, raw, uploads, None, idem).await
}

/// A create-shaped body: JSON or multipart (the OpenAI SDK always sends multipart).
async fn read_request(
    app: &App,
    headers: &HeaderMap,
    body: Hashed,
    what: &str,
) -> Result<(RawCreate, Uploads), ApiError> {
    match media_type(headers).as_deref() {
        Some("application/json") => {
            let bytes = read_body(body, app.config.server.json_limit()).await?;
            Ok((
                RawCreate::from_json(parse_json(&bytes)?)?,
                Uploads::default(),
            ))
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
            Ok((RawCreate { fields }, uploads))
        }
        other => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!(
                "{what} takes application/json or multipart/form-data, got {}",
                other.unwrap_or("no Content-Type")
            ),
        )),
    }
}

/// How a new task derives from a completed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derivation {
    /// `POST /v1/videos/{id}/remix`.
    Remix,
    /// `POST /v1/videos/edits`.
    Edit,
    /// `POST /v1/videos/extensions`.
    Extend,
}

impl Derivation {
    /// The field naming the source in the request.
    fn field(self) -> &'static str {
        match self {
            Derivation::Remix => "video_id",
            Derivation::Edit | Derivation::Extend => videos_v1::derive::SOURCE_FIELD,
        }
    }

    fn done(self) -> &'static str {
        match self {
            Derivation::Remix => "remixed",
            Derivation::Edit => "edited",
            Derivation::Extend => "extended",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Derivation::Remix => "remix",
            Derivation::Edit => "edit",
            Derivation::Extend => "extend",
        }
    }
}

/// Where a derived task comes from, as `create_from` needs it.
struct Origin {
    how: Derivation,
    source: String,
    /// Seconds the new task's record adds to its own (an extension's source length).
    base_seconds: u32,
    /// A stored picture of the source the new video starts from (an extension's source's
    /// last frame).
    first_frame: Option<String>,
}

/// `POST /v1/videos/{id}/remix`: a new task from a `completed` one of the key's owner, with
/// the new `prompt` and the source's model, size and seconds unless the body gives them.
pub async fn remix(
    app: &Arc<App>,
    key: &store::Key,
    id: &str,
    headers: &HeaderMap,
    body: Hashed,
    idem: &mut Idem,
) -> Result<Task, ApiError> {
    let source = tasks::owned(app, key, id, TaskKind::Video).await?;
    if media_type(headers).as_deref() != Some("application/json") {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "POST /v1/videos/{id}/remix takes application/json",
        ));
    }
    let bytes = read_body(body, app.config.server.json_limit()).await?;
    let value = parse_json(&bytes)?;
    if !value.is_object() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "the body must be a JSON object with a prompt",
        ));
    }
    let raw = RawCreate::from_json(value)?;
    derive(app, key, headers, &source, raw, Derivation::Remix, idem).await
}

/// `POST /v1/videos/edits` (`how`: [`Derivation::Edit`]): a new task re-rendering a
/// `completed` video of the key's owner (`video`: `{"id"}`, multipart `video[id]`) with a new
/// `prompt`; model, size and seconds are the source's unless the body gives them.
/// `POST /v1/videos/extensions` ([`Derivation::Extend`]): a new task continuing such a video
/// by `seconds` (charged for those seconds); its record's `seconds` is the stitched total.
pub async fn edit_or_extend(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    body: Hashed,
    how: Derivation,
    idem: &mut Idem,
) -> Result<Task, ApiError> {
    let route = match how {
        Derivation::Edit => "POST /v1/videos/edits",
        Derivation::Extend => "POST /v1/videos/extensions",
        Derivation::Remix => "POST /v1/videos/{id}/remix",
    };
    let (raw, _uploads) = read_request(app, headers, body, route).await?;
    let source = source_of(app, key, &raw).await?;
    derive(app, key, headers, &source, raw, how, idem).await
}

/// The key's own video that an edit or extension names.
async fn source_of(app: &App, key: &store::Key, raw: &RawCreate) -> Result<Task, ApiError> {
    let id = videos_v1::derive::source_id(raw)?;
    tasks::owned(app, key, id, TaskKind::Video)
        .await
        .map_err(|e| ApiError {
            param: Some(videos_v1::derive::SOURCE_FIELD.to_owned()),
            ..e
        })
}

/// A new task from `source`, a video of the key's owner, which must be `completed` and made
/// by the simulator: an upstream remixes, edits or extends only its own video, by its own id,
/// which an ordinary creation on another call would not.
async fn derive(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    source: &Task,
    mut raw: RawCreate,
    how: Derivation,
    idem: &mut Idem,
) -> Result<Task, ApiError> {
    let id = &source.id;
    if source.status != TaskStatus::Succeeded {
        return Err(ApiError::new(
            ErrorCode::TaskNotCompleted,
            format!(
                "task {id} is {}, not completed: only a completed video can be {}",
                status_of(source.status).as_str(),
                how.done()
            ),
        ));
    }
    let made_by = source.channel.as_deref().unwrap_or_default();
    if app
        .engine
        .channel_named(made_by)
        .is_none_or(|c| c.kind() != "simulator")
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            how.field(),
            format!(
                "task {id} was made by channel {made_by}, which cannot {}; only the simulator's videos can be {}",
                how.verb(),
                how.done()
            ),
        ));
    }
    let p: V1Params = read_params(source).map_err(unreadable)?;
    // The source's framing and length stand unless the body gives its own; references are the
    // source's video, not the body's.
    for name in videos_v1::REFERENCE_FIELDS {
        videos_v1::derive::remove(&mut raw, name);
    }
    videos_v1::derive::remove(&mut raw, "reference_video_audio");
    videos_v1::derive::remove(&mut raw, "model");
    videos_v1::derive::remove_source(&mut raw);
    raw.push("model", FieldValue::Json(json!(source.model)));
    let has = |raw: &RawCreate, name: &str| raw.fields.iter().any(|(n, _)| n == name);
    if how == Derivation::Extend {
        // A continuation keeps its source's framing.
        videos_v1::derive::remove(&mut raw, "size");
        videos_v1::derive::remove(&mut raw, "aspect_ratio");
    }
    if !has(&raw, "size") && !has(&raw, "aspect_ratio") {
        raw.push(
            "size",
            FieldValue::Json(json!(format!("{}x{}", p.width, p.height))),
        );
    }
    let mut origin = Origin {
        how,
        source: id.clone(),
        base_seconds: 0,
        first_frame: None,
    };
    if how == Derivation::Extend {
        if !videos_v1::derive::has_duration(&raw) {
            return Err(ApiError::field(
                ErrorCode::InvalidDuration,
                "seconds",
                "seconds is required: the length of the new segment",
            ));
        }
        if source.expires_at.is_some_and(|at| at <= now_secs()) {
            return Err(ApiError::field(
                ErrorCode::NotFound,
                videos_v1::derive::SOURCE_FIELD,
                format!("the content of task {id} has expired"),
            ));
        }
        origin.base_seconds = p.duration;
        origin.first_frame = source.outputs.last_frame.clone();
    } else if !videos_v1::derive::has_duration(&raw) {
        // A stitched extension may be longer than a creation: its length is no default.
        if p.duration > videos_v1::MAX_DURATION {
            return Err(ApiError::field(
                ErrorCode::InvalidDuration,
                "seconds",
                format!(
                    "task {id} is {} seconds, longer than the {} a new video may be; give seconds",
                    p.duration,
                    videos_v1::MAX_DURATION
                ),
            ));
        }
        raw.push("duration", FieldValue::Json(json!(p.duration)));
    }
    create_from(
        app,
        key,
        headers,
        raw,
        Uploads::default(),
        Some(origin),
        idem,
    )
    .await
}

/// A new task from a parsed create request; `origin` is the task it derives from.
async fn create_from(
    app: &Arc<App>,
    key: &store::Key,
    headers: &HeaderMap,
    raw: RawCreate,
    mut uploads: Uploads,
    origin: Option<Origin>,
    idem: &mut Idem,
) -> Result<Task, ApiError> {
    idem.claim(app).await?;
    let mut valid = videos_v1::validate(&raw)?;
    if let Some(url) = &valid.callback_url {
        crate::ground::webhook_signing::check_url(&app.poster, "callback_url", url)?;
    }
    let first_frame_param = videos_v1::first_frame_param(&raw);
    // A `data:` URI is in `valid` now; the request's own copy of it goes.
    drop(raw);
    tasks::may_use(key, &valid.model)?;
    let sim = crate::ground::http::sim_directives(app.sim_scenarios(), headers)?;
    tasks::served(app, &valid.model)?;

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
    let base_seconds = origin.as_ref().map_or(0, |o| o.base_seconds);
    if base_seconds > 0 {
        videos_v1::derive::check_extended(base_seconds, valid.duration)?;
    }
    // Whether a channel of the model can make it (the task's params say the same: see
    // `engine::formats::video::demand`), before anything is stored.
    let given = Given {
        first_frame: first.is_some() || origin.as_ref().is_some_and(|o| o.first_frame.is_some()),
        last_frame: last.is_some(),
        audio: audio.is_some(),
        video: video.is_some(),
    };
    let demand = demand_of(
        framing.width,
        framing.height,
        framing.ratio,
        valid.duration + base_seconds,
        given,
    );
    tasks::fits(app, TaskKind::Video, &valid.model, &demand)?;

    let id = crate::ground::http::new_id("video");
    // Store the frames and references under the task before the task exists: a refused creation
    // removes them.
    let mut stored = StoredFiles::new(app.blobs.clone(), &id);
    let created = async {
        let first_frame = match first {
            Some(f) => Some(
                stored
                    .keep(f, "first_frame", &valid.first_frame, &mut uploads)
                    .await?,
            ),
            None => None,
        };
        let last_frame = match last {
            Some(f) => Some(
                stored
                    .keep(f, "last_frame", &valid.last_frame, &mut uploads)
                    .await?,
            ),
            None => None,
        };
        let (audio, audio_blob) = stored.keep_reference(audio, "audio", &mut uploads).await?;
        let (reference_video, reference_video_blob) = stored
            .keep_reference(video, "reference_video", &mut uploads)
            .await?;
        // An extension starts from its source's last frame, copied under the new task.
        let first_frame = match origin.as_ref().and_then(|o| o.first_frame.as_deref()) {
            Some(blob) => Some(stored.copy(blob, "first_frame").await?),
            None => first_frame,
        };
        let source = |how: Derivation| {
            origin
                .as_ref()
                .filter(|o| o.how == how)
                .map(|o| o.source.clone())
        };
        let params = V1Params {
            prompt: valid.prompt.clone(),
            width: framing.width,
            height: framing.height,
            aspect_ratio: framing.ratio,
            duration: valid.duration + base_seconds,
            first_frame,
            last_frame,
            audio,
            reference_video,
            audio_blob,
            reference_video_blob,
            reference_video_audio: valid.reference_video_audio,
            sim: sim.clone(),
            remixed_from: source(Derivation::Remix),
            edited_from: source(Derivation::Edit),
            extended_from: source(Derivation::Extend),
        };
        let draft = tasks::Draft {
            id,
            model: &valid.model,
            params: &params,
            sim: &sim,
            warnings,
            price,
            callback_url: valid.callback_url.take(),
        };
        let task = tasks::new_task::<Videos, _>(app, key, draft)?;
        tasks::create::<Videos>(app, &task, idem).await?;
        Ok::<_, ApiError>(task)
    }
    .await;
    match created {
        Ok(task) => {
            stored.keep_all();
            Ok(task)
        }
        Err(e) => {
            stored.remove_all().await;
            Err(e)
        }
    }
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
    let inline = match content::wants_inline(query) {
        Ok(inline) => inline,
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
    if task.expires_at.is_some_and(|at| at <= now_secs()) {
        return error(&ApiError::new(
            ErrorCode::NotFound,
            format!("the content of task {id} has expired"),
        ));
    }
    let blob = match variant {
        Variant::Video => task.outputs.video.as_deref(),
        Variant::Thumbnail => task.outputs.thumbnail.as_deref(),
        Variant::Spritesheet => match task.outputs.spritesheet.as_deref() {
            Some(blob) => Some(blob),
            None => {
                return error(&ApiError::field(
                    ErrorCode::NotFound,
                    "variant",
                    format!(
                        "variant not available: task {id} has no spritesheet (its channel made none)"
                    ),
                ));
            }
        },
    };
    // Stored under their sniffed type's extension (a JPEG thumbnail from an upstream is .jpg).
    let content_type = blob.map_or(
        "application/octet-stream",
        crate::ground::signed::content_type,
    );
    match blob {
        // With presigned URLs, `serve_blob` below sends the client straight to the store
        // rather than through the relay's own signed link.
        Some(blob)
            if app.config.server.content_mode == ContentMode::Redirect
                && app.presign_ttl().is_none() =>
        {
            let expires = now_secs() + app.config.server.signed_url_ttl_secs;
            let mut url = app.signer.url(&app.public_base_url(), blob, expires);
            if inline {
                url.push_str("&disposition=inline");
            }
            content::redirect(&url)
        }
        Some(blob) => {
            let disposition = content::Disposition::of(blob, inline);
            serve_blob(
                &app.blobs,
                blob,
                content_type,
                &disposition,
                headers,
                app.presign_ttl(),
            )
            .await
        }
        None => error(&ApiError::new(
            ErrorCode::NotFound,
            "the task has no such content",
        )),
    }
}

/// `DELETE /v1/videos/{id}`.
pub async fn delete(app: &Arc<App>, key: &store::Key, id: &str) -> Answer {
    match tasks::delete(app, key, id, TaskKind::Video).await {
        Ok(()) => crate::ground::http::json(
            StatusCode::OK,
            &json!({"id": id, "object": "video.deleted", "deleted": true}),
        ),
        Err(e) => error(&e),
    }
}
