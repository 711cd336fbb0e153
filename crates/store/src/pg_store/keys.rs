//! Keys on PostgreSQL (by id, and by the hash of their secret, kept unique by a constraint)
//! and the small named values of `meta`.

use tokio_postgres::types::Json;

use super::ledger::lock_key;
use super::pool::PgStore;
use super::txn::{Fault, Sql, check_id, decode, retry};
use crate::steps::KeyUpdate;
use crate::{Key, StoreError};

const KEYS: &str = "keys";
const KEYS_PKEY: &str = "keys_pkey";
const HASH_UNIQUE: &str = "keys_hash_unique";

/// A unique violation of the keys table as the store's answer: an id in use, a hash in use.
fn key_conflict(fault: Fault, id: &str) -> Fault {
    match fault.unique_violation() {
        Some(HASH_UNIQUE) => StoreError::DuplicateKey.into(),
        Some(KEYS_PKEY) => StoreError::Backend(format!("key {id} already exists")).into(),
        _ => fault,
    }
}

/// [`crate::Store::create_key`]: an id in use is refused before a hash in use, as the embedded
/// backend does.
pub(super) async fn create(store: &PgStore, key: &Key) -> Result<(), StoreError> {
    check_id("key id", &key.id)?;
    let what = format!("create key {}", key.id);
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let taken = tx
            .query_opt(
                "SELECT id = $1 FROM keys WHERE id = $1 OR hash = $2 ORDER BY 1 DESC LIMIT 1",
                &[&key.id, &key.hash],
            )
            .await
            .sql(what)?;
        if let Some(row) = taken {
            let same_id: bool = row.try_get(0).sql(what)?;
            return Err(if same_id {
                StoreError::Backend(format!("key {} already exists", key.id))
            } else {
                StoreError::DuplicateKey
            }
            .into());
        }
        tx.execute(
            "INSERT INTO keys (id, hash, record) VALUES ($1, $2, $3)",
            &[&key.id, &key.hash, &Json(key)],
        )
        .await
        .sql(what)
        .map_err(|f| key_conflict(f, &key.id))?;
        tx.commit()
            .await
            .sql(what)
            .map_err(|f| key_conflict(f, &key.id))
    })
    .await
}

/// The key whose column `column` (`id` or `hash`) is `value`.
async fn by(store: &PgStore, column: &str, value: &str) -> Result<Option<Key>, StoreError> {
    let what = format!("read key by {column}");
    let client = store.client(&what).await?;
    let sql = format!("SELECT record::text FROM keys WHERE {column} = $1");
    let row = client
        .query_opt(&sql, &[&value])
        .await
        .sql(&what)
        .map_err(Fault::into_store)?;
    match row {
        Some(row) => {
            let text: String = row.try_get(0).sql(&what).map_err(Fault::into_store)?;
            decode(KEYS, &text).map(Some)
        }
        None => Ok(None),
    }
}

pub(super) async fn get_by_id(store: &PgStore, id: &str) -> Result<Option<Key>, StoreError> {
    by(store, "id", id).await
}

pub(super) async fn by_hash(store: &PgStore, hash: &str) -> Result<Option<Key>, StoreError> {
    by(store, "hash", hash).await
}

/// Every key, by id.
pub(super) async fn all(store: &PgStore) -> Result<Vec<Key>, StoreError> {
    let client = store.client("list keys").await?;
    let rows = client
        .query("SELECT record::text FROM keys ORDER BY id", &[])
        .await
        .sql("list keys")
        .map_err(Fault::into_store)?;
    let mut keys = Vec::with_capacity(rows.len());
    for row in &rows {
        let text: String = row.try_get(0).sql("list keys").map_err(Fault::into_store)?;
        keys.push(decode(KEYS, &text)?);
    }
    Ok(keys)
}

pub(super) async fn count(store: &PgStore) -> Result<usize, StoreError> {
    let client = store.client("count keys").await?;
    let n: i64 = client
        .query_one("SELECT count(*) FROM keys", &[])
        .await
        .and_then(|row| row.try_get(0))
        .sql("count keys")
        .map_err(Fault::into_store)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// [`crate::Store::update_key`]: the key's row locked, `update` applied, written back.
pub(super) async fn update(
    store: &PgStore,
    id: &str,
    update: KeyUpdate<'_>,
) -> Result<Key, StoreError> {
    let what = format!("update key {id}");
    let what = what.as_str();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let Some(old) = lock_key(&tx, id, what).await? else {
            return Err(StoreError::KeyNotFound(id.to_owned()).into());
        };
        let mut new = old.clone();
        update(&mut new);
        new.id.clone_from(&old.id);
        if new.hash != old.hash {
            let taken = tx
                .query_opt("SELECT 1 FROM keys WHERE hash = $1", &[&new.hash])
                .await
                .sql(what)?;
            if taken.is_some() {
                return Err(StoreError::DuplicateKey.into());
            }
        }
        tx.execute(
            "UPDATE keys SET hash = $2, record = $3 WHERE id = $1",
            &[&id, &new.hash, &Json(&new)],
        )
        .await
        .sql(what)
        .map_err(|f| key_conflict(f, id))?;
        tx.commit().await.sql(what)?;
        Ok(new)
    })
    .await
}

pub(super) async fn meta(store: &PgStore, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let what = format!("read meta {name}");
    let client = store.client(&what).await?;
    let row = client
        .query_opt("SELECT value FROM meta WHERE name = $1", &[&name])
        .await
        .sql(&what)
        .map_err(Fault::into_store)?;
    row.map(|row| row.try_get(0))
        .transpose()
        .sql(&what)
        .map_err(Fault::into_store)
}

/// [`crate::Store::meta_init`]: written unless a value is there; the value now stored.
pub(super) async fn meta_init(
    store: &PgStore,
    name: &str,
    value: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let what = format!("init meta {name}");
    let client = store.client(&what).await?;
    let written = client
        .execute(
            "INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &value],
        )
        .await
        .sql(&what)
        .map_err(Fault::into_store)?;
    if written == 1 {
        return Ok(value.to_vec());
    }
    // Another value was there (or committed meanwhile): this statement sees it.
    let row = client
        .query_one("SELECT value FROM meta WHERE name = $1", &[&name])
        .await
        .sql(&what)
        .map_err(Fault::into_store)?;
    row.try_get(0).sql(&what).map_err(Fault::into_store)
}
