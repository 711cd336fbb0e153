//! Asset libraries and assets on sled: their own trees, every step one multi-tree transaction
//! over them.
//!
//! | tree                 | key                                         | value               |
//! |----------------------|---------------------------------------------|---------------------|
//! | `libraries`          | library id                                  | JSON [`Library`]    |
//! | `libraries_by_owner` | owner `\0` library id                       | empty               |
//! | `assets`             | asset id                                    | JSON [`AssetRecord`] |
//! | `assets_by_library`  | library id `\0` asset id                    | empty               |
//! | `assets_by_expiry`   | `expires_at` (8 bytes big-endian) asset id  | empty               |
//! | `assets_processing`  | asset id                                    | empty               |
//!
//! An asset has an `assets_by_expiry` entry exactly when it is `active` with an `expires_at`,
//! and an `assets_processing` entry exactly when it is `processing`. A library's
//! `asset_count` is changed in the same transaction as every asset creation and deletion.
//!
//! Each step is a function over the [`AssetTrees`]; the Store impl flushes after the steps
//! that need it.

use sled::Tree;

use super::index::{children, move_entry, pair_key, prefix, split_time_key, time_key};
use super::record::{backend, check_id, encode, read};
use super::txn::{TxResult, abort, ensure_new, get, put, tree_set};
use crate::steps::AssetUpdate;
use crate::{AssetQuery, AssetRecord, AssetStatus, Library, Order, Page, StoreError};

const LIBRARIES: &str = "libraries";
const LIBRARIES_BY_OWNER: &str = "libraries_by_owner";
const ASSETS: &str = "assets";
const ASSETS_BY_LIBRARY: &str = "assets_by_library";
const ASSETS_BY_EXPIRY: &str = "assets_by_expiry";
const ASSETS_PROCESSING: &str = "assets_processing";

/// Largest page of a listing.
const MAX_PAGE: usize = 100;
/// Times `delete_library` starts over when assets were added meanwhile.
const DELETE_ATTEMPTS: usize = 8;

tree_set! {
    /// The asset trees of a [`SledStore`](super::trees::SledStore).
    pub(super) struct AssetTrees / Tx {
        libraries: LIBRARIES,
        libraries_by_owner: LIBRARIES_BY_OWNER,
        assets: ASSETS,
        assets_by_library: ASSETS_BY_LIBRARY,
        assets_by_expiry: ASSETS_BY_EXPIRY,
        assets_processing: ASSETS_PROCESSING,
    }
}

pub(super) fn create_library(trees: &AssetTrees, library: &Library) -> Result<(), StoreError> {
    check_id("library id", &library.id)?;
    check_id("library owner", &library.owner)?;
    let mut library = library.clone();
    library.asset_count = 0;
    let bytes = encode("library", &library)?;
    let what = format!("create library {}", library.id);
    trees.tx(&what, |tx| {
        ensure_new(tx.libraries, "library", &library.id)?;
        tx.libraries
            .insert(library.id.as_bytes(), bytes.as_slice())?;
        tx.libraries_by_owner
            .insert(pair_key(&library.owner, &library.id), &[][..])?;
        Ok(())
    })
}

pub(super) fn library(trees: &AssetTrees, id: &str) -> Result<Option<Library>, StoreError> {
    read(&trees.libraries, LIBRARIES, id.as_bytes(), "read library")
}

pub(super) fn list_libraries(
    trees: &AssetTrees,
    owner: &str,
    after: Option<&str>,
    limit: usize,
    order: Order,
) -> Result<Page<Library>, StoreError> {
    let ids = children(
        &trees.libraries_by_owner,
        prefix(owner),
        after,
        order,
        "read index",
    );
    page(
        ids,
        limit,
        |id| library(trees, &String::from_utf8_lossy(id)),
        |_| true,
    )
}

pub(super) fn delete_library(
    trees: &AssetTrees,
    id: &str,
) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError> {
    let what = format!("delete library {id}");
    for _ in 0..DELETE_ATTEMPTS {
        // Transactions cannot range over a tree: read the asset ids first, then check in
        // the transaction that they are all of the library's assets (its count says how
        // many there are; every creation and deletion changes it in its own transaction).
        let mut ids = Vec::new();
        for key in trees.assets_by_library.scan_prefix(prefix(id)).keys() {
            let key = key.map_err(|e| backend("read library index", e))?;
            ids.push(key[id.len() + 1..].to_vec());
        }
        let outcome = trees.tx(&what, |tx| {
            let Some(library): Option<Library> = get(tx.libraries, LIBRARIES, id.as_bytes())?
            else {
                return Ok(Some(None));
            };
            let mut removed = Vec::with_capacity(ids.len());
            for asset_id in &ids {
                let Some(asset): Option<AssetRecord> = get(tx.assets, ASSETS, asset_id)? else {
                    continue;
                };
                if asset.library_id == library.id {
                    removed.push(asset);
                }
            }
            if removed.len() as u64 != library.asset_count {
                // An asset was added after the ids were read: start over (nothing was
                // written yet).
                return Ok(None);
            }
            for asset in &removed {
                remove_asset(tx, asset)?;
            }
            tx.libraries.remove(id.as_bytes())?;
            tx.libraries_by_owner
                .remove(pair_key(&library.owner, &library.id))?;
            Ok(Some(Some((library, removed))))
        })?;
        if let Some(done) = outcome {
            return Ok(done);
        }
    }
    Err(StoreError::Backend(format!(
        "{what}: assets kept being added; try again"
    )))
}

pub(super) fn create_asset(trees: &AssetTrees, asset: &AssetRecord) -> Result<(), StoreError> {
    let bytes = new_asset(asset)?;
    let what = format!("create asset {}", asset.id);
    trees.tx(&what, |tx| insert_asset(tx, asset, &bytes))
}

/// A new asset's ids checked and its record encoded, for [`insert_asset`].
pub(super) fn new_asset(asset: &AssetRecord) -> Result<Vec<u8>, StoreError> {
    check_id("asset id", &asset.id)?;
    check_id("asset library", &asset.library_id)?;
    encode("asset", asset)
}

/// Writes a new asset (`bytes`, from [`new_asset`]) with its index entries and counts it in
/// its library, inside a transaction over the asset trees.
pub(super) fn insert_asset(tx: &Tx<'_>, asset: &AssetRecord, bytes: &[u8]) -> TxResult<()> {
    let Some(mut library): Option<Library> =
        get(tx.libraries, LIBRARIES, asset.library_id.as_bytes())?
    else {
        return abort(StoreError::LibraryNotFound(asset.library_id.clone()));
    };
    if library.owner != asset.owner || library.family != asset.family {
        return abort(StoreError::LibraryNotFound(asset.library_id.clone()));
    }
    ensure_new(tx.assets, "asset", &asset.id)?;
    tx.assets.insert(asset.id.as_bytes(), bytes)?;
    tx.assets_by_library
        .insert(pair_key(&asset.library_id, &asset.id), &[][..])?;
    if asset.status == AssetStatus::Processing {
        tx.assets_processing.insert(asset.id.as_bytes(), &[][..])?;
    }
    if let Some(k) = expiry_key(asset) {
        tx.assets_by_expiry.insert(k, &[][..])?;
    }
    library.asset_count += 1;
    put(tx.libraries, library.id.as_bytes(), "library", &library)?;
    Ok(())
}

pub(super) fn asset(trees: &AssetTrees, id: &str) -> Result<Option<AssetRecord>, StoreError> {
    asset_by_bytes(trees, id.as_bytes())
}

fn asset_by_bytes(trees: &AssetTrees, id: &[u8]) -> Result<Option<AssetRecord>, StoreError> {
    read(&trees.assets, ASSETS, id, "read asset")
}

pub(super) fn list_assets(
    trees: &AssetTrees,
    query: &AssetQuery,
) -> Result<Page<AssetRecord>, StoreError> {
    let ids = children(
        &trees.assets_by_library,
        prefix(&query.library_id),
        query.after.as_deref(),
        query.order,
        "read index",
    );
    page(
        ids,
        query.limit,
        |id| asset_by_bytes(trees, id),
        |asset| {
            query.status.is_none_or(|s| s == asset.status)
                && query.asset_type.is_none_or(|t| asset.asset_type == Some(t))
        },
    )
}

/// The first `limit` (1 to [`MAX_PAGE`]) records named by `ids` that `keep` accepts, past ids
/// whose record is gone (deleted between the index read and this one); `has_more` when one
/// more follows.
fn page<T>(
    ids: impl Iterator<Item = Result<Vec<u8>, StoreError>>,
    limit: usize,
    read: impl Fn(&[u8]) -> Result<Option<T>, StoreError>,
    keep: impl Fn(&T) -> bool,
) -> Result<Page<T>, StoreError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut items = Vec::new();
    let mut has_more = false;
    for id in ids {
        let Some(item) = read(&id?)? else {
            continue;
        };
        if !keep(&item) {
            continue;
        }
        if items.len() == limit {
            has_more = true;
            break;
        }
        items.push(item);
    }
    Ok(Page { items, has_more })
}

pub(super) fn transition_asset(
    trees: &AssetTrees,
    id: &str,
    from: &[AssetStatus],
    to: AssetStatus,
    update: AssetUpdate<'_>,
) -> Result<AssetRecord, StoreError> {
    let what = format!("transition asset {id}");
    trees.tx(&what, |tx| {
        let Some(old): Option<AssetRecord> = get(tx.assets, ASSETS, id.as_bytes())? else {
            return abort(StoreError::AssetNotFound(id.to_owned()));
        };
        let allowed = !old.status.is_final()
            && from.contains(&old.status)
            && (old.status == to || old.status.can_move_to(to));
        if !allowed {
            return abort(StoreError::AssetWrongStatus {
                asset_id: id.to_owned(),
                expected: from.to_vec(),
                to,
                actual: old.status,
            });
        }
        let mut new = old.clone();
        update(&mut new);
        // Identity fields key the indexes and the library's count.
        new.id.clone_from(&old.id);
        new.owner.clone_from(&old.owner);
        new.library_id.clone_from(&old.library_id);
        new.family.clone_from(&old.family);
        new.created_at = old.created_at;
        new.status = to;
        if old.status == AssetStatus::Processing && to != AssetStatus::Processing {
            tx.assets_processing.remove(id.as_bytes())?;
        }
        move_entry(tx.assets_by_expiry, expiry_key(&old), expiry_key(&new))?;
        put(tx.assets, id.as_bytes(), "asset", &new)?;
        Ok(new)
    })
}

pub(super) fn expired_assets(
    trees: &AssetTrees,
    now_secs: u64,
    limit: usize,
) -> Result<Vec<AssetRecord>, StoreError> {
    let index = &trees.assets_by_expiry;
    indexed(trees, index, "read asset expiry index", limit, |key| {
        let (at, id) = split_time_key(key, ASSETS_BY_EXPIRY, "key shorter than 9 bytes")?;
        Ok((at <= now_secs).then_some(id))
    })
}

pub(super) fn processing_assets(
    trees: &AssetTrees,
    limit: usize,
) -> Result<Vec<AssetRecord>, StoreError> {
    let index = &trees.assets_processing;
    indexed(trees, index, "read processing index", limit, |key| {
        Ok(Some(key))
    })
}

/// Up to `limit` assets named by the keys of `index`, in its order: `id` reads an asset id out
/// of a key, or none to stop there; a key whose asset is gone is passed over. `what` names
/// the index read in an error.
fn indexed(
    trees: &AssetTrees,
    index: &Tree,
    what: &str,
    limit: usize,
    id: impl Fn(&[u8]) -> Result<Option<&[u8]>, StoreError>,
) -> Result<Vec<AssetRecord>, StoreError> {
    let mut out = Vec::new();
    for key in index.iter().keys() {
        if out.len() >= limit {
            break;
        }
        let key = key.map_err(|e| backend(what, e))?;
        let Some(id) = id(&key)? else {
            break;
        };
        if let Some(asset) = asset_by_bytes(trees, id)? {
            out.push(asset);
        }
    }
    Ok(out)
}

pub(super) fn delete_asset(
    trees: &AssetTrees,
    id: &str,
) -> Result<Option<AssetRecord>, StoreError> {
    let what = format!("delete asset {id}");
    trees.tx(&what, |tx| {
        let Some(asset): Option<AssetRecord> = get(tx.assets, ASSETS, id.as_bytes())? else {
            return Ok(None);
        };
        remove_asset(tx, &asset)?;
        let library: Option<Library> = get(tx.libraries, LIBRARIES, asset.library_id.as_bytes())?;
        if let Some(mut library) = library {
            library.asset_count = library.asset_count.saturating_sub(1);
            put(tx.libraries, library.id.as_bytes(), "library", &library)?;
        }
        Ok(Some(asset))
    })
}

/// Removes an asset and its index entries (not its library's count).
fn remove_asset(tx: &Tx<'_>, asset: &AssetRecord) -> TxResult<()> {
    tx.assets.remove(asset.id.as_bytes())?;
    tx.assets_by_library
        .remove(pair_key(&asset.library_id, &asset.id))?;
    tx.assets_processing.remove(asset.id.as_bytes())?;
    if let Some(k) = expiry_key(asset) {
        tx.assets_by_expiry.remove(k)?;
    }
    Ok(())
}

/// The expiry index key: only an active asset with an `expires_at` has one.
fn expiry_key(asset: &AssetRecord) -> Option<Vec<u8>> {
    match (asset.status, asset.expires_at) {
        (AssetStatus::Active, Some(at)) => Some(time_key(at, asset.id.as_bytes())),
        _ => None,
    }
}
