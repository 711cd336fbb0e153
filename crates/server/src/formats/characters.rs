//! Characters of the first format: `POST /v1/videos/characters` (multipart: `name` and a
//! `video` file part, mp4 or mov) and `GET /v1/videos/characters/{id}`. A character is kept
//! per key in the store, its video as a blob; other keys never see it. The simulator renders
//! without it: a character is stored and read back, not yet drawn.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use fetch::MediaKind;
use http::HeaderMap;
use hyper::body::Incoming;
use store::{Character, Key};
use videos_v1::{CHARACTER_VIDEO_FIELD, CharacterObject, FieldValue};

use crate::app::App;
use crate::ground::http::{Answer, MAX_ID_LEN, error, media_type, new_id, ok, store_unavailable};
use crate::ground::multipart;

fn record(character: &Character) -> CharacterObject {
    CharacterObject {
        id: character.id.clone(),
        object: "video.character".to_owned(),
        name: character.name.clone(),
        created_at: character.created_at,
    }
}

/// `POST /v1/videos/characters`.
pub async fn create(app: &Arc<App>, key: &Key, headers: &HeaderMap, body: Incoming) -> Answer {
    match created(app, key, headers, body).await {
        Ok(character) => ok(&record(&character)),
        Err(e) => error(&e),
    }
}

async fn created(
    app: &Arc<App>,
    key: &Key,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<Character, ApiError> {
    if media_type(headers).as_deref() != Some("multipart/form-data") {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "POST /v1/videos/characters takes multipart/form-data (name, and the video as a file part)",
        ));
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let limits = multipart::Limits {
        body: app.config.server.upload_limit(),
        text: app.config.server.max_body_bytes,
        long_text: &[],
    };
    let (fields, mut uploads) = multipart::read(body, content_type, limits, &app.blobs).await?;
    let name = videos_v1::character_name(fields.iter().filter_map(|(n, v)| match v {
        FieldValue::Text(text) if n == "name" => Some(text.as_str()),
        _ => None,
    }))?
    .to_owned();
    let invalid_video = |why: &str| {
        ApiError::field(
            ErrorCode::InvalidVideo,
            CHARACTER_VIDEO_FIELD,
            format!("video {why}; accepted: an mp4 or mov file part"),
        )
    };
    let mut parts = fields.iter().filter(|(n, _)| n == CHARACTER_VIDEO_FIELD);
    let part = match (parts.next(), parts.next()) {
        (Some((_, FieldValue::File(part))), None) => part,
        (None, _) => return Err(invalid_video("is required")),
        (Some(_), Some(_)) => return Err(invalid_video("is given more than once")),
        (Some(_), None) => return Err(invalid_video("must be a file part")),
    };
    let upload = uploads
        .0
        .get(part.index)
        .ok_or_else(|| invalid_video("upload is missing"))?;
    let format = fetch::sniff(&upload.prefix)
        .filter(|f| f.kind() == MediaKind::Video)
        .ok_or_else(|| invalid_video("is not in a supported format"))?;
    let id = new_id("char");
    let blob = format!("characters/{id}/video.{}", format.as_str());
    let video_bytes = uploads
        .commit(part.index, &*app.blobs, &blob)
        .await
        .map_err(|e| {
            tracing::error!("storing {blob}: {e}");
            ApiError::new(ErrorCode::Unavailable, "the video could not be stored")
        })?;
    let character = Character {
        id,
        owner: key.id.clone(),
        name,
        created_at: engine::now_secs(),
        video: blob,
        video_bytes,
    };
    if let Err(e) = app.store.create_character(&character, u64::MAX, &[]).await {
        if let Err(removal) = app.blobs.delete(&character.video).await {
            tracing::warn!(
                "removing {} of a refused character: {removal}",
                character.video
            );
        }
        return Err(store_unavailable(e));
    }
    Ok(character)
}

/// `GET /v1/videos/characters/{id}`: another key's or an unknown id is `404`.
pub async fn get(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    let not_found = || {
        error(&ApiError::new(
            ErrorCode::NotFound,
            format!("no character {id}"),
        ))
    };
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return not_found();
    }
    match app.store.character(id).await {
        Ok(Some(character)) if character.owner == key.id => ok(&record(&character)),
        Ok(_) => not_found(),
        Err(e) => error(&store_unavailable(e)),
    }
}
