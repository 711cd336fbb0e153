//! Characters of the first format: `POST /v1/videos/characters` (multipart: `name` and a
//! `video` file part, mp4 or mov), `GET /v1/videos/characters` (the key's own, paged as
//! `GET /v1/videos`), `GET` and `DELETE /v1/videos/characters/{id}`. A character is kept per
//! key in the store, its video as a blob; other keys never see it. A key has at most
//! `[characters] max_per_key` of them, and each creation takes `[characters] price` credits
//! through the ledger, both in the store step that writes it. The simulator renders without
//! them: a character is stored and read back, not yet drawn.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use fetch::MediaKind;
use http::HeaderMap;
use hyper::body::Incoming;
use store::{Character, Key, LedgerDraft, LedgerKind, StoreError};
use videos_v1::{
    CHARACTER_VIDEO_FIELD, CharacterList, CharacterObject, DeletedCharacter, FieldValue, ListOrder,
};

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
    let settings = &app.config.characters;
    // A price above what the ledger holds cannot be configured (TOML integers are i64).
    let price = i64::try_from(settings.price).unwrap_or(i64::MAX);
    let charge: Vec<LedgerDraft> = (price > 0)
        .then(|| LedgerDraft {
            key_id: key.id.clone(),
            task_id: character.id.clone(),
            kind: LedgerKind::Charge,
            amount: -price,
        })
        .into_iter()
        .collect();
    let stored = app
        .store
        .create_character(&character, settings.max_per_key, &charge)
        .await;
    if let Err(e) = stored {
        if let Err(removal) = app.blobs.delete(&character.video).await {
            tracing::warn!(
                "removing {} of a refused character: {removal}",
                character.video
            );
        }
        return Err(refusal(e));
    }
    app.engine.metrics().ledger(&charge);
    Ok(character)
}

/// A creation the store refused, as the client's error.
fn refusal(e: StoreError) -> ApiError {
    match e {
        StoreError::CharacterLimit { max: 0, .. } => ApiError::new(
            ErrorCode::Forbidden,
            "this relay lets no key create characters ([characters] max_per_key = 0)",
        ),
        StoreError::CharacterLimit { max, .. } => ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "this key has {max} characters, the most a key may have; delete one \
                 (DELETE /v1/videos/characters/{{id}}) to create another"
            ),
        ),
        StoreError::InsufficientQuota {
            needed, remaining, ..
        } => ApiError::new(
            ErrorCode::InsufficientQuota,
            format!("a character costs {needed} credits; the key has {remaining} left"),
        ),
        e => store_unavailable(e),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no character {id}"))
}

/// `GET /v1/videos/characters/{id}`: another key's or an unknown id is `404`.
pub async fn get(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return error(&not_found(id));
    }
    match app.store.character(id).await {
        Ok(Some(character)) if character.owner == key.id => ok(&record(&character)),
        Ok(_) => error(&not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `GET /v1/videos/characters?limit=&after=&order=`: the key's own characters, newest first
/// by default, with the query rules of `GET /v1/videos`.
pub async fn list(app: &Arc<App>, key: &Key, query: Option<&str>) -> Answer {
    let params = match videos_v1::parse_list_query(query) {
        Ok(params) => params,
        Err(e) => return error(&e),
    };
    let order = match params.order {
        ListOrder::Asc => store::Order::Asc,
        ListOrder::Desc => store::Order::Desc,
    };
    let page = app
        .store
        .list_characters(&key.id, params.after.as_deref(), params.limit, order)
        .await;
    match page {
        Ok(page) => ok(&CharacterList::new(
            page.items.iter().map(record).collect(),
            page.has_more,
        )),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `DELETE /v1/videos/characters/{id}`: the key's own character and its video, which frees a
/// place of its number (the charge of its creation stays); another key's or an unknown id is
/// `404`.
pub async fn delete(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return error(&not_found(id));
    }
    match app.store.delete_character(id, &key.id).await {
        Ok(Some(character)) => {
            // The record is gone: a failure here leaves a file no link can reach any more.
            if let Err(e) = app.blobs.delete(&character.video).await {
                tracing::warn!("removing {} of a deleted character: {e}", character.video);
            }
            ok(&DeletedCharacter::new(character.id))
        }
        Ok(None) => error(&not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}
