//! Asset libraries and assets (CONTRACT §2.2): the handlers, the background processing that
//! turns an uploaded or fetched file into an `active` (or `failed`) asset, the expiry sweep,
//! and [`asset_facts`] for the generation endpoint.
//!
//! - A library belongs to the key that created it and to the channel family of that key's
//!   group (`[groups]`); another key's libraries and assets are `404`.
//! - An upload answers at once with the asset `processing`. A multipart file is committed as
//!   the asset's blob (`assets/<id>/original`) before the record is written; a URL is fetched
//!   later, with the SSRF-guarded fetcher. [`run`] picks up every `processing` asset from the
//!   store's index (so also those left by a restart), at most [`CONCURRENCY`] at once, and
//!   moves it to `active` (format, size, image dimensions, `expires_at` = now + `[assets]
//!   ttl_secs`) or `failed` (`error`: see [`assets::FailureCode`]).
//! - [`run`] also moves `active` assets past `expires_at` to `expired`, from the store's expiry
//!   index, without any request touching them. Expired assets keep their bytes until deleted.
//! - Deleting an asset or a library removes the stored bytes.

mod inspect;
mod processor;
mod wire;

use std::sync::Arc;

use assets::{AssetListQuery, AssetObject, Deleted, LibraryObject, List, Part, UploadSource};
use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use http::HeaderMap;
use hyper::body::Incoming;
use store::{
    AssetQuery, AssetRecord, AssetSource, AssetStatus, AssetType, Key, Library, StoreError,
};
use videos_v1::FieldValue;

use crate::app::App;
use crate::formats::idempotency::{Hashed, Idem};
use crate::ground::http::{
    Answer, MAX_ID_LEN, error, media_type, ok, parse_json, read_body, store_unavailable,
};
use crate::ground::multipart;

pub use inspect::{Inspected, Rejected, inspect};
use processor::remove_blobs;
pub use processor::{CONCURRENCY, run};
pub use wire::{blob_id, library_record, record, wire_status, wire_type};
use wire::{new_id, store_order, store_status, store_type};

fn no_library(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no asset library {id}"))
}

fn no_asset(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no asset {id}"))
}

/// Library `id` when `key` owns it; otherwise `404` (never telling whether it exists).
async fn owned_library(app: &Arc<App>, key: &Key, id: &str) -> Result<Library, ApiError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(no_library(id));
    }
    let library = app
        .store
        .library(id)
        .await
        .map_err(store_unavailable)?
        .filter(|l| l.owner == key.id)
        .ok_or_else(|| no_library(id))?;
    Ok(library)
}

/// Asset `id` when `key` owns it; otherwise `404`.
async fn owned_asset(app: &Arc<App>, key: &Key, id: &str) -> Result<AssetRecord, ApiError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(no_asset(id));
    }
    app.store
        .asset(id)
        .await
        .map_err(store_unavailable)?
        .filter(|a| a.owner == key.id)
        .ok_or_else(|| no_asset(id))
}

fn require_json(headers: &HeaderMap, what: &str) -> Result<(), ApiError> {
    match media_type(headers).as_deref() {
        Some("application/json") => Ok(()),
        other => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!(
                "{what} takes application/json, got {}",
                other.unwrap_or("no Content-Type")
            ),
        )),
    }
}

fn answer<T: serde::Serialize>(result: Result<T, ApiError>) -> Answer {
    match result {
        Ok(value) => ok(&value),
        Err(e) => error(&e),
    }
}

// ---- libraries ----

/// `POST /v1/asset-libraries`.
pub async fn create_library(
    app: &Arc<App>,
    key: &Key,
    headers: &HeaderMap,
    body: Incoming,
) -> Answer {
    answer(create_library_inner(app, key, headers, body).await)
}

async fn create_library_inner(
    app: &Arc<App>,
    key: &Key,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<LibraryObject, ApiError> {
    require_json(headers, "POST /v1/asset-libraries")?;
    let bytes = read_body(body, app.config.server.json_limit()).await?;
    let create = assets::parse_create_library(&parse_json(&bytes)?)?;
    let family = app.config.groups.get(&key.group).cloned().ok_or_else(|| {
        ApiError::new(
            ErrorCode::GroupMismatch,
            format!(
                "this key's group {} has no channel family, so it cannot hold assets; use a key \
                 of a group listed in [groups]",
                key.group
            ),
        )
    })?;
    let library = Library {
        id: new_id("lib"),
        owner: key.id.clone(),
        name: create.name,
        family,
        created_at: now_secs(),
        asset_count: 0,
    };
    app.store
        .create_library(&library)
        .await
        .map_err(store_unavailable)?;
    Ok(library_record(&library))
}

/// `GET /v1/asset-libraries`.
pub async fn list_libraries(app: &Arc<App>, key: &Key, query: Option<&str>) -> Answer {
    let q = match assets::parse_library_list_query(query) {
        Ok(q) => q,
        Err(e) => return error(&e),
    };
    let page = app
        .store
        .list_libraries(&key.id, q.after.as_deref(), q.limit, store_order(q.order))
        .await;
    answer(page.map_err(store_unavailable).map(|p| {
        List::new(
            p.items.iter().map(library_record).collect(),
            p.has_more,
            |l| &l.id,
        )
    }))
}

/// `GET /v1/asset-libraries/{id}`.
pub async fn get_library(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    answer(
        owned_library(app, key, id)
            .await
            .map(|l| library_record(&l)),
    )
}

/// `DELETE /v1/asset-libraries/{id}`: the library, its assets and their bytes.
pub async fn delete_library(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    let result = async {
        let library = owned_library(app, key, id).await?;
        let removed = app
            .store
            .delete_library(&library.id)
            .await
            .map_err(store_unavailable)?;
        // A concurrent delete of the same library answers as if it were this one.
        let ids = removed
            .map(|(_, assets)| assets.into_iter().map(|a| a.id).collect())
            .unwrap_or_default();
        remove_blobs(app, ids).await;
        Ok(Deleted::library(library.id))
    }
    .await;
    answer(result)
}

// ---- assets ----

/// `POST /v1/asset-libraries/{id}/assets`: multipart (`file`, optional `type`) or JSON
/// (`url`, optional `type`).
pub async fn upload(
    app: &Arc<App>,
    key: &Key,
    library_id: &str,
    headers: &HeaderMap,
    body: Hashed,
    idem: &mut Idem,
) -> Answer {
    answer(upload_inner(app, key, library_id, headers, body, idem).await)
}

async fn upload_inner(
    app: &Arc<App>,
    key: &Key,
    library_id: &str,
    headers: &HeaderMap,
    body: Hashed,
    idem: &mut Idem,
) -> Result<AssetObject, ApiError> {
    let library = owned_library(app, key, library_id).await?;
    let id = new_id("asset");
    let now = now_secs();
    let (valid, uploads) = match media_type(headers).as_deref() {
        Some("application/json") => {
            let bytes = read_body(body, app.config.server.json_limit()).await?;
            (assets::parse_json_upload(&parse_json(&bytes)?)?, None)
        }
        Some("multipart/form-data") => {
            let content_type = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let limits = multipart::Limits {
                body: app.config.server.upload_limit(),
                text: app.config.server.max_body_bytes,
                long_text: &[],
            };
            let (fields, uploads) = multipart::read(body, content_type, limits, &app.blobs).await?;
            let parts: Vec<(String, Part)> = fields
                .into_iter()
                .map(|(name, value)| {
                    let part = match value {
                        FieldValue::File(f) => Part::File {
                            index: f.index,
                            len: f.len,
                        },
                        FieldValue::Text(t) => Part::Text(t),
                        FieldValue::Json(v) => Part::Text(v.to_string()),
                    };
                    (name, part)
                })
                .collect();
            (assets::parse_multipart_upload(&parts)?, Some(uploads))
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                format!(
                    "POST /v1/asset-libraries/{{id}}/assets takes multipart/form-data or \
                     application/json, got {}",
                    other.unwrap_or("no Content-Type")
                ),
            ));
        }
    };
    idem.claim(app).await?;
    let declared = valid.declared.map(store_type);
    let (source, blob) = match valid.source {
        UploadSource::Url(url) => (AssetSource::Url(url), None),
        UploadSource::File { index, .. } => {
            // The bytes become the asset's blob before the record exists, so processing (also
            // after a restart) always finds them.
            let mut uploads = uploads.unwrap_or_default();
            let blob = blob_id(&id);
            if let Err(e) = uploads.commit(index, &*app.blobs, &blob).await {
                tracing::error!(asset = %id, "storing an upload: {e}");
                return Err(ApiError::new(
                    ErrorCode::Unavailable,
                    "the upload could not be stored now",
                ));
            }
            (AssetSource::Upload, Some(blob))
        }
    };
    let asset = AssetRecord {
        id: id.clone(),
        owner: key.id.clone(),
        library_id: library.id.clone(),
        family: library.family.clone(),
        declared_type: declared,
        asset_type: declared,
        status: AssetStatus::Processing,
        source,
        blob,
        format: None,
        bytes: None,
        width: None,
        height: None,
        created_at: now,
        updated_at: now,
        expires_at: None,
        error: None,
    };
    // With a claimed `Idempotency-Key`, the answer is kept with the key in the asset's own
    // store step, so a retry answers this asset whatever stops the process afterwards.
    let stored = match idem.claimed_ticket() {
        Some(ticket) => {
            let kept = crate::formats::idempotency::task_answer(&record(&asset))?;
            app.store
                .create_asset_idempotent(&asset, ticket, &kept)
                .await
        }
        None => app.store.create_asset(&asset).await,
    };
    match stored {
        Ok(()) => idem.kept(),
        Err(e) => {
            remove_blobs(app, vec![id.clone()]).await;
            return Err(match e {
                // Deleted since it was looked up.
                StoreError::LibraryNotFound(_) => no_library(library_id),
                StoreError::IdempotencyLost(_) => crate::formats::idempotency::conflict(
                    "was taken over by a later request while this one was handled",
                ),
                e => store_unavailable(e),
            });
        }
    }
    app.asset_wake.notify_one();
    Ok(record(&asset))
}

/// `GET /v1/asset-libraries/{id}/assets?status=&type=&limit=&after=&order=`.
pub async fn list_assets(
    app: &Arc<App>,
    key: &Key,
    library_id: &str,
    query: Option<&str>,
) -> Answer {
    let result = async {
        let q: AssetListQuery = assets::parse_asset_list_query(query)?;
        let library = owned_library(app, key, library_id).await?;
        let query = AssetQuery {
            library_id: library.id,
            status: q.status.map(store_status),
            asset_type: q.asset_type.map(store_type),
            after: q.after,
            limit: q.limit,
            order: store_order(q.order),
        };
        let page = app
            .store
            .list_assets(&query)
            .await
            .map_err(store_unavailable)?;
        Ok(List::new(
            page.items.iter().map(record).collect(),
            page.has_more,
            |a| &a.id,
        ))
    }
    .await;
    answer(result)
}

/// `GET /v1/assets/{id}`.
pub async fn get_asset(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    match owned_asset(app, key, id).await {
        Ok(asset) => {
            let mut res = ok(&record(&asset));
            if asset.status == AssetStatus::Processing {
                res.headers_mut().insert(
                    "openai-poll-after-ms",
                    http::HeaderValue::from_static("1000"),
                );
            }
            res
        }
        Err(e) => error(&e),
    }
}

/// `DELETE /v1/assets/{id}`: the record and its bytes.
pub async fn delete_asset(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    let result = async {
        let asset = owned_asset(app, key, id).await?;
        app.store
            .delete_asset(&asset.id)
            .await
            .map_err(store_unavailable)?;
        remove_blobs(app, vec![asset.id.clone()]).await;
        Ok(Deleted::asset(asset.id))
    }
    .await;
    answer(result)
}

// ---- facts for the generation endpoint ----

/// What the generation endpoint needs to know about one referenced asset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetFact {
    /// For `video_generations::check_assets`: another owner's asset does not exist.
    pub fact: video_generations::AssetFact,
    /// Blob id of the stored bytes (of an asset that exists and was stored).
    pub blob: Option<String>,
    /// `jpeg`, `png`, `mp4`, ...
    pub format: Option<String>,
    /// `(width, height)` of an image.
    pub dimensions: Option<(u32, u32)>,
}

/// One fact per id, in the order given (repeated ids give repeated facts). Another owner's
/// asset is reported exactly like a missing one.
pub async fn asset_facts(
    app: &Arc<App>,
    key: &Key,
    ids: &[String],
) -> Result<Vec<AssetFact>, ApiError> {
    let mut facts = Vec::with_capacity(ids.len());
    for id in ids {
        let asset = if id.is_empty() || id.len() > MAX_ID_LEN {
            None
        } else {
            let found = app.store.asset(id).await.map_err(store_unavailable)?;
            found.filter(|a| a.owner == key.id)
        };
        facts.push(fact_of(id.clone(), asset.as_ref()));
    }
    Ok(facts)
}

fn fact_of(id: String, asset: Option<&AssetRecord>) -> AssetFact {
    use video_generations::{AssetState, MediaType};
    let Some(a) = asset else {
        return AssetFact {
            fact: video_generations::AssetFact {
                id,
                ..Default::default()
            },
            blob: None,
            format: None,
            dimensions: None,
        };
    };
    AssetFact {
        fact: video_generations::AssetFact {
            id,
            exists: true,
            status: Some(match a.status {
                AssetStatus::Processing => AssetState::Processing,
                AssetStatus::Active => AssetState::Active,
                AssetStatus::Failed => AssetState::Failed,
                AssetStatus::Expired => AssetState::Expired,
            }),
            family: Some(a.family.clone()),
            media: a.asset_type.map(|t| match t {
                AssetType::Image => MediaType::Image,
                AssetType::Video => MediaType::Video,
                AssetType::Audio => MediaType::Audio,
            }),
        },
        blob: a.blob.clone(),
        format: a.format.clone(),
        dimensions: a.width.zip(a.height),
    }
}

// ---- background work ----

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_rules_agree_with_the_protocol_crate() {
        let all = [
            AssetStatus::Processing,
            AssetStatus::Active,
            AssetStatus::Failed,
            AssetStatus::Expired,
        ];
        for from in all {
            assert_eq!(from.is_final(), wire_status(from).is_final());
            for to in all {
                assert_eq!(
                    from.can_move_to(to),
                    assets::can_move(wire_status(from), wire_status(to)),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }

    #[test]
    fn facts_of_missing_and_found_assets() {
        let missing = fact_of("asset_x".into(), None);
        assert!(!missing.fact.exists);
        assert_eq!(missing.fact.id, "asset_x");
        let a = AssetRecord {
            id: "asset_1".into(),
            owner: "key_1".into(),
            library_id: "lib_1".into(),
            family: "gen2".into(),
            declared_type: None,
            asset_type: Some(AssetType::Image),
            status: AssetStatus::Active,
            source: AssetSource::Upload,
            blob: Some(blob_id("asset_1")),
            format: Some("png".into()),
            bytes: Some(10),
            width: Some(640),
            height: Some(480),
            created_at: 1,
            updated_at: 1,
            expires_at: Some(2),
            error: None,
        };
        let f = fact_of("asset_1".into(), Some(&a));
        assert!(f.fact.exists);
        assert_eq!(f.fact.status, Some(video_generations::AssetState::Active));
        assert_eq!(f.fact.family.as_deref(), Some("gen2"));
        assert_eq!(f.fact.media, Some(video_generations::MediaType::Image));
        assert_eq!(f.dimensions, Some((640, 480)));
        assert_eq!(f.blob.as_deref(), Some("assets/asset_1/original"));
        let wire = serde_json::to_value(record(&a)).unwrap();
        assert_eq!(wire["type"], "image");
        assert_eq!(wire["status"], "active");
        assert!(wire.get("width").is_none());
    }

    #[test]
    fn ids_increase_within_a_millisecond() {
        let ids: Vec<String> = (0..2000).map(|_| new_id("asset")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ids, sorted);
    }
}
