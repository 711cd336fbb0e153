//! The background work of assets: processing each `processing` asset into `active` or
//! `failed` (fetching a URL upload with the guarded fetcher, inspecting the bytes), and the
//! expiry sweep that moves `active` assets past `expires_at` to `expired`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use assets::FailureCode;
use engine::now_secs;
use fetch::FetchError;
use store::{AssetRecord, AssetSource, AssetStatus, StoreError};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::inspect::{Inspected, Rejected, inspect};
use super::wire::{blob_id, blob_prefix, kind_of, store_type_of};
use crate::app::App;

/// Assets processed at once.
pub const CONCURRENCY: usize = 4;
/// How often [`run`] looks for expired assets and for processing work nobody announced.
const TICK: Duration = Duration::from_millis(500);
/// Expired assets moved per look.
const EXPIRY_BATCH: usize = 256;
/// How long [`run`] waits at shutdown for the processing steps under way.
const DRAIN: Duration = Duration::from_secs(10);

/// Processes assets and expires them until `shutdown` turns true; then lets the processing
/// steps under way finish (a fetch is abandoned: its asset stays `processing` and is picked up
/// at the next start).
pub async fn run(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let mut work: JoinSet<()> = JoinSet::new();
    // Asset ids under way, by the id of the task processing them.
    let mut in_flight: HashMap<tokio::task::Id, String> = HashMap::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        // Start processing what the index holds, up to the limit.
        let free = CONCURRENCY.saturating_sub(in_flight.len());
        if free > 0 {
            let limit = in_flight.len() + free;
            match app.store.processing_assets(limit).await {
                Ok(pending) => {
                    let pending: Vec<AssetRecord> = pending
                        .into_iter()
                        .filter(|a| !in_flight.values().any(|id| *id == a.id))
                        .take(free)
                        .collect();
                    for asset in pending {
                        let id = asset.id.clone();
                        let (app, stop) = (app.clone(), shutdown.clone());
                        let task = work.spawn(async move { process(&app, asset, stop).await });
                        in_flight.insert(task.id(), id);
                    }
                }
                Err(e) => tracing::error!("assets: reading the processing index: {e}"),
            }
        }
        expire_due(&app).await;
        tokio::select! {
            Some(done) = work.join_next_with_id(), if !work.is_empty() => {
                let task = match done {
                    Ok((task, ())) => task,
                    Err(e) => {
                        // The asset stays `processing` and is tried again.
                        tracing::error!("assets: a processing step failed: {e}");
                        e.id()
                    }
                };
                in_flight.remove(&task);
            }
            () = app.asset_wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
            changed = shutdown.changed() => {
                if changed.is_err() {
                    // The server is gone without saying stop: stop too.
                    break;
                }
            }
        }
    }
    if tokio::time::timeout(DRAIN, async { while work.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!("assets: processing still under way after {DRAIN:?}; abandoning it");
        work.shutdown().await;
    }
}

/// Moves every active asset past its `expires_at` to `expired`.
async fn expire_due(app: &Arc<App>) {
    loop {
        let now = now_secs();
        let due = match app.store.expired_assets(now, EXPIRY_BATCH).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!("assets: reading the expiry index: {e}");
                return;
            }
        };
        let full = due.len() == EXPIRY_BATCH;
        for asset in &due {
            let moved = app
                .store
                .transition_asset(
                    &asset.id,
                    &[AssetStatus::Active],
                    AssetStatus::Expired,
                    &|a| {
                        a.updated_at = now;
                    },
                )
                .await;
            match moved {
                Ok(_)
                | Err(StoreError::AssetNotFound(_))
                | Err(StoreError::AssetWrongStatus { .. }) => {}
                Err(e) => {
                    tracing::error!("assets: expiring: {e}");
                    return;
                }
            }
        }
        if !full {
            return;
        }
    }
}

/// Where a processed asset ended.
enum Outcome {
    Active(Inspected),
    Failed(Rejected),
}

/// Processes one `processing` asset to `active` or `failed`.
async fn process(app: &Arc<App>, asset: AssetRecord, mut shutdown: watch::Receiver<bool>) {
    let id = asset.id.clone();
    let declared = asset.declared_type.map(kind_of);
    let max_image = app.config.security.max_image_bytes;
    let outcome = match &asset.source {
        AssetSource::Url(url) => {
            let fetched = tokio::select! {
                got = app.fetcher.fetch(url, app.config.server.max_upload_bytes) => got,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            match fetched {
                Err(e) => Ok(Outcome::Failed(fetch_failure(&e))),
                Ok(bytes) => {
                    let inspected = {
                        let bytes = bytes.clone();
                        tokio::task::spawn_blocking(move || {
                            let len = bytes.len() as u64;
                            let mut reader = std::io::Cursor::new(&bytes[..]);
                            inspect(&mut reader, len, declared, max_image)
                        })
                        .await
                        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
                    };
                    match inspected {
                        Ok(Ok(found)) => app
                            .blobs
                            .put_bytes(&blob_id(&id), bytes)
                            .await
                            .map(|_| Outcome::Active(found)),
                        Ok(Err(rejected)) => Ok(Outcome::Failed(rejected)),
                        Err(e) => Err(e),
                    }
                }
            }
        }
        AssetSource::Upload => {
            let blob = asset.blob.clone().unwrap_or_else(|| blob_id(&id));
            // A remote blob store hands the file over as a local (unlinked) temporary file.
            match app.blobs.open_file(&blob).await {
                Ok((mut file, len)) => tokio::task::spawn_blocking(move || {
                    Ok(match inspect(&mut file, len, declared, max_image)? {
                        Ok(found) => Outcome::Active(found),
                        Err(rejected) => Outcome::Failed(rejected),
                    })
                })
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e))),
                Err(e) => Err(e),
            }
        }
    };
    let outcome = outcome.unwrap_or_else(|e| {
        tracing::error!(asset = %id, "processing: {e}");
        Outcome::Failed(Rejected {
            code: FailureCode::StorageError,
            message: "the relay could not store or read the file".into(),
        })
    });
    let now = now_secs();
    let ttl = app.config.assets.ttl_secs;
    let blob = blob_id(&id);
    let failed = matches!(outcome, Outcome::Failed(_));
    let written = match &outcome {
        Outcome::Active(found) => {
            app.store
                .transition_asset(&id, &[AssetStatus::Processing], AssetStatus::Active, &|a| {
                    a.asset_type = Some(store_type_of(found.kind));
                    a.format = Some(found.format.as_str().to_owned());
                    a.bytes = Some(found.bytes);
                    a.width = found.dims.map(|d| d.0);
                    a.height = found.dims.map(|d| d.1);
                    a.blob = Some(blob.clone());
                    a.updated_at = now;
                    a.expires_at = Some(now.saturating_add(ttl));
                })
                .await
        }
        Outcome::Failed(rejected) => {
            app.store
                .transition_asset(&id, &[AssetStatus::Processing], AssetStatus::Failed, &|a| {
                    a.error = Some(store::AssetError {
                        code: rejected.code.as_str().to_owned(),
                        message: rejected.message.clone(),
                    });
                    a.blob = None;
                    a.updated_at = now;
                })
                .await
        }
    };
    match written {
        Ok(_) if failed => remove_blobs(app, vec![id]).await,
        Ok(_) => {}
        // Deleted while it was processed: its bytes go too.
        Err(StoreError::AssetNotFound(_)) => remove_blobs(app, vec![id]).await,
        // Another step finished it first.
        Err(StoreError::AssetWrongStatus { .. }) => {}
        Err(e) => tracing::error!(asset = %id, "processing: recording the outcome: {e}"),
    }
}

fn fetch_failure(e: &FetchError) -> Rejected {
    let code = match e {
        FetchError::TooLarge => FailureCode::TooLarge,
        _ => FailureCode::UnreachableUrl,
    };
    Rejected {
        code,
        message: format!("the URL could not be fetched: {e}"),
    }
}

/// Removes an asset's stored bytes, off the async workers; failures are logged only (the
/// record is gone either way).
pub(crate) async fn remove_blobs(app: &Arc<App>, asset_ids: Vec<String>) {
    if asset_ids.is_empty() {
        return;
    }
    for id in asset_ids {
        if let Err(e) = app.blobs.delete_prefix(&blob_prefix(&id)).await {
            tracing::warn!(asset = %id, "removing the asset's bytes: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_failures() {
        assert_eq!(
            fetch_failure(&FetchError::TooLarge).code,
            FailureCode::TooLarge
        );
        for e in [
            FetchError::Timeout,
            FetchError::Status(404),
            FetchError::Blocked { host: "x".into() },
            FetchError::Connect("x".into()),
        ] {
            let r = fetch_failure(&e);
            assert_eq!(r.code, FailureCode::UnreachableUrl);
            assert!(r.message.starts_with("the URL could not be fetched"));
        }
    }
}
