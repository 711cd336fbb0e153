//! Asset libraries and assets on PostgreSQL. A library's row lock orders every step that
//! changes its assets' number (creation, deletion of an asset or of the library), so its
//! `asset_count` stays exact and a library deleted while assets are added leaves none behind.

use deadpool_postgres::Transaction;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::idempotency::complete;
use super::names::{asset_status, asset_type};
use super::pool::PgStore;
use super::txn::{self, Fault, Filter, Sql, big, check_id, decode, retry};
use crate::steps::AssetUpdate;
use crate::{
    AssetQuery, AssetRecord, AssetStatus, IdemAnswer, IdemTicket, Library, Order, Page, StoreError,
};

const LIBRARIES: &str = "libraries";
const ASSETS: &str = "assets";
/// Largest page of a listing.
const MAX_PAGE: usize = 100;

fn record<T: serde::de::DeserializeOwned>(
    table: &'static str,
    row: &Row,
    what: &str,
) -> Result<T, Fault> {
    let text: String = row.try_get(0).sql(what)?;
    Ok(decode(table, &text)?)
}

fn records<T: serde::de::DeserializeOwned>(
    table: &'static str,
    rows: &[Row],
    what: &str,
) -> Result<Vec<T>, StoreError> {
    rows.iter()
        .map(|row| record(table, row, what))
        .collect::<Result<_, _>>()
        .map_err(Fault::into_store)
}

/// The `expiry` column: `expires_at` while the asset is active.
fn expiry(asset: &AssetRecord) -> Option<i64> {
    match (asset.status, asset.expires_at) {
        (AssetStatus::Active, Some(at)) => Some(big(at)),
        _ => None,
    }
}

pub(super) async fn create_library(store: &PgStore, library: &Library) -> Result<(), StoreError> {
    check_id("library id", &library.id)?;
    check_id("library owner", &library.owner)?;
    let mut library = library.clone();
    library.asset_count = 0;
    let what = format!("create library {}", library.id);
    let client = store.client(&what).await?;
    let written = txn::execute(
        &client,
        &what,
        "INSERT INTO libraries (id, owner, record) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO NOTHING",
        &[&library.id, &library.owner, &Json(&library)],
    )
    .await
    .map_err(Fault::into_store)?;
    if written == 0 {
        return Err(StoreError::Backend(format!(
            "library {} already exists",
            library.id
        )));
    }
    Ok(())
}

pub(super) async fn library(store: &PgStore, id: &str) -> Result<Option<Library>, StoreError> {
    let client = store.client("read library").await?;
    let sql = "SELECT record::text FROM libraries WHERE id = $1";
    let rows = txn::query(&client, "read library", sql, &[&id])
        .await
        .map_err(Fault::into_store)?;
    Ok(records(LIBRARIES, &rows, "read library")?.pop())
}

/// `SQL`'s comparison and direction for a cursor in `order`.
fn direction(order: Order) -> (&'static str, &'static str) {
    match order {
        Order::Desc => ("<", "DESC"),
        Order::Asc => (">", "ASC"),
    }
}

fn page<T>(mut items: Vec<T>, limit: usize) -> Page<T> {
    let has_more = items.len() > limit;
    items.truncate(limit);
    Page { items, has_more }
}

pub(super) async fn list_libraries(
    store: &PgStore,
    owner: &str,
    after: Option<&str>,
    limit: usize,
    order: Order,
) -> Result<Page<Library>, StoreError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let (cmp, dir) = direction(order);
    let n = big(limit as u64 + 1);
    let mut filter = Filter::default();
    filter.and("owner = ?", &[&owner]);
    filter.and_some(&format!("id {cmp} ?"), &after);
    let limit_param = filter.param(&n);
    let (clause, params) = filter.finish();
    let sql =
        format!("SELECT record::text FROM libraries{clause} ORDER BY id {dir} LIMIT {limit_param}");
    let client = store.client("list libraries").await?;
    let rows = txn::query(&client, "list libraries", &sql, &params)
        .await
        .map_err(Fault::into_store)?;
    Ok(page(records(LIBRARIES, &rows, "list libraries")?, limit))
}

/// The library `id`, its row locked until the transaction ends.
async fn lock_library(
    tx: &Transaction<'_>,
    id: &str,
    what: &str,
) -> Result<Option<Library>, Fault> {
    let sql = "SELECT record::text FROM libraries WHERE id = $1 FOR UPDATE";
    let row = txn::query_opt(tx, what, sql, &[&id]).await?;
    row.map(|row| record(LIBRARIES, &row, what)).transpose()
}

pub(super) async fn delete_library(
    store: &PgStore,
    id: &str,
) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError> {
    let what = format!("delete library {id}");
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        // Locked first, by a statement of its own: the deletion below then sees every asset
        // added before the lock was granted.
        let Some(library) = lock_library(&tx, id, what).await? else {
            return Ok(None);
        };
        let rows = txn::query(
            &tx,
            what,
            "WITH library AS (DELETE FROM libraries WHERE id = $1) \
             DELETE FROM assets WHERE library_id = $1 RETURNING record::text",
            &[&id],
        )
        .await?;
        let mut removed: Vec<AssetRecord> = rows
            .iter()
            .map(|row| record(ASSETS, row, what))
            .collect::<Result<_, _>>()?;
        removed.sort_by(|a, b| a.id.cmp(&b.id));
        tx.commit().await.sql(what)?;
        Ok(Some((library, removed)))
    })
    .await
}

/// [`crate::Store::create_asset`]; with `idem`, also
/// [`crate::Store::create_asset_idempotent`]'s completion of the key's record.
pub(super) async fn create_asset(
    store: &PgStore,
    asset: &AssetRecord,
    idem: Option<(&IdemTicket, &IdemAnswer)>,
) -> Result<(), StoreError> {
    check_id("asset id", &asset.id)?;
    check_id("asset library", &asset.library_id)?;
    let what = format!("create asset {}", asset.id);
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        if let Some((ticket, answer)) = idem {
            complete(&tx, ticket, answer).await?;
        }
        let library = lock_library(&tx, &asset.library_id, what).await?;
        let Some(mut library) =
            library.filter(|l| l.owner == asset.owner && l.family == asset.family)
        else {
            return Err(StoreError::LibraryNotFound(asset.library_id.clone()).into());
        };
        library.asset_count += 1;
        // The asset, and the library counting it when it was written, in one statement.
        let written = txn::query_one(
            &tx,
            what,
            "WITH asset AS ( \
                INSERT INTO assets (id, library_id, status, asset_type, expiry, record) \
                VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING 1 \
             ), library AS ( \
                UPDATE libraries SET record = $7 WHERE id = $2 AND EXISTS (SELECT 1 FROM asset) \
             ) \
             SELECT count(*) FROM asset",
            &[
                &asset.id,
                &asset.library_id,
                &asset_status(asset.status),
                &asset.asset_type.map(asset_type),
                &expiry(asset),
                &Json(asset),
                &Json(&library),
            ],
        )
        .await?;
        let written: i64 = written.try_get(0).sql(what)?;
        if written == 0 {
            return Err(StoreError::Backend(format!("asset {} already exists", asset.id)).into());
        }
        tx.commit().await.sql(what)
    })
    .await
}

pub(super) async fn asset(store: &PgStore, id: &str) -> Result<Option<AssetRecord>, StoreError> {
    let client = store.client("read asset").await?;
    let sql = "SELECT record::text FROM assets WHERE id = $1";
    let rows = txn::query(&client, "read asset", sql, &[&id])
        .await
        .map_err(Fault::into_store)?;
    Ok(records(ASSETS, &rows, "read asset")?.pop())
}

pub(super) async fn list_assets(
    store: &PgStore,
    query: &AssetQuery,
) -> Result<Page<AssetRecord>, StoreError> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let (cmp, dir) = direction(query.order);
    let status = query.status.map(asset_status);
    let kind = query.asset_type.map(asset_type);
    let n = big(limit as u64 + 1);
    let mut filter = Filter::default();
    filter.and("library_id = ?", &[&query.library_id]);
    filter.and_some("status = ?", &status);
    filter.and_some("asset_type = ?", &kind);
    filter.and_some(&format!("id {cmp} ?"), &query.after);
    let limit_param = filter.param(&n);
    let (clause, params) = filter.finish();
    let sql =
        format!("SELECT record::text FROM assets{clause} ORDER BY id {dir} LIMIT {limit_param}");
    let client = store.client("list assets").await?;
    let rows = txn::query(&client, "list assets", &sql, &params)
        .await
        .map_err(Fault::into_store)?;
    Ok(page(records(ASSETS, &rows, "list assets")?, limit))
}

pub(super) async fn transition_asset(
    store: &PgStore,
    id: &str,
    from: &[AssetStatus],
    to: AssetStatus,
    update: AssetUpdate<'_>,
) -> Result<AssetRecord, StoreError> {
    let what = format!("transition asset {id}");
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let sql = "SELECT record::text FROM assets WHERE id = $1 FOR UPDATE";
        let row = txn::query_opt(&tx, what, sql, &[&id]).await?;
        let Some(row) = row else {
            return Err(StoreError::AssetNotFound(id.to_owned()).into());
        };
        let old: AssetRecord = record(ASSETS, &row, what)?;
        let allowed = !old.status.is_final()
            && from.contains(&old.status)
            && (old.status == to || old.status.can_move_to(to));
        if !allowed {
            return Err(StoreError::AssetWrongStatus {
                asset_id: id.to_owned(),
                expected: from.to_vec(),
                to,
                actual: old.status,
            }
            .into());
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
        txn::execute(
            &tx,
            what,
            "UPDATE assets SET status = $2, asset_type = $3, expiry = $4, record = $5 \
             WHERE id = $1",
            &[
                &id,
                &asset_status(to),
                &new.asset_type.map(asset_type),
                &expiry(&new),
                &Json(&new),
            ],
        )
        .await?;
        tx.commit().await.sql(what)?;
        Ok(new)
    })
    .await
}

pub(super) async fn expired_assets(
    store: &PgStore,
    now_secs: u64,
    limit: usize,
) -> Result<Vec<AssetRecord>, StoreError> {
    let client = store.client("read asset expiry index").await?;
    let rows = txn::query(
        &client,
        "read asset expiry index",
        "SELECT record::text FROM assets WHERE expiry <= $1 ORDER BY expiry, id LIMIT $2",
        &[&big(now_secs), &big(limit as u64)],
    )
    .await
    .map_err(Fault::into_store)?;
    records(ASSETS, &rows, "read asset expiry index")
}

pub(super) async fn processing_assets(
    store: &PgStore,
    limit: usize,
) -> Result<Vec<AssetRecord>, StoreError> {
    let client = store.client("read processing index").await?;
    let rows = txn::query(
        &client,
        "read processing index",
        "SELECT record::text FROM assets WHERE status = 'processing' ORDER BY id LIMIT $1",
        &[&big(limit as u64)],
    )
    .await
    .map_err(Fault::into_store)?;
    records(ASSETS, &rows, "read processing index")
}

pub(super) async fn delete_asset(
    store: &PgStore,
    id: &str,
) -> Result<Option<AssetRecord>, StoreError> {
    let what = format!("delete asset {id}");
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        // The library first, as every step that counts its assets locks it: the asset's
        // library, locked, in the statement that finds the asset.
        let sql = "SELECT (SELECT l.record::text FROM libraries l WHERE l.id = a.library_id \
                           FOR UPDATE) \
                   FROM assets a WHERE a.id = $1";
        let Some(found) = txn::query_opt(&tx, what, sql, &[&id]).await? else {
            return Ok(None);
        };
        let library: Option<String> = found.try_get(0).sql(what)?;
        let library = match library {
            Some(text) => {
                let mut library: Library = decode(LIBRARIES, &text)?;
                library.asset_count = library.asset_count.saturating_sub(1);
                Some(library)
            }
            None => None,
        };
        // The asset (found again by this statement, now that the library is locked), and its
        // library (when there is one) uncounting it when it was deleted.
        let row = txn::query_opt(
            &tx,
            what,
            "WITH asset AS (DELETE FROM assets WHERE id = $1 RETURNING record::text AS record), \
                  library AS ( \
                    UPDATE libraries SET record = $3 \
                    WHERE id = $2 AND EXISTS (SELECT 1 FROM asset) \
                  ) \
             SELECT record FROM asset",
            &[
                &id,
                &library.as_ref().map(|l| l.id.as_str()),
                &library.as_ref().map(Json),
            ],
        )
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let asset: AssetRecord = record(ASSETS, &row, what)?;
        tx.commit().await.sql(what)?;
        Ok(Some(asset))
    })
    .await
}
