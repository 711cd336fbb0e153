//! Keys on PostgreSQL (by id, and by the hash of their secret, kept unique by a constraint)
//! and the small named values of `meta`.

use tokio_postgres::types::Json;

use super::ledger::lock_key;
use super::pool::PgStore;
use super::txn::{self, Fault, Sql, check_id, decode, retry};
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
/// backend does. One statement: what is in the way, if anything, and the key written if
/// nothing is (a key written meanwhile by another step breaks a unique constraint instead).
pub(super) async fn create(store: &PgStore, key: &Key) -> Result<(), StoreError> {
    check_id("key id", &key.id)?;
    let what = format!("create key {}", key.id);
    let client = store.client(&what).await?;
    let taken = txn::query_opt(
        &client,
        &what,
        "WITH taken AS ( \
            SELECT id = $1 AS same_id FROM keys WHERE id = $1 OR hash = $2 \
            ORDER BY 1 DESC LIMIT 1 \
         ), written AS ( \
            INSERT INTO keys (id, hash, record) SELECT $1, $2, $3 \
            WHERE NOT EXISTS (SELECT 1 FROM taken) \
         ) \
         SELECT same_id FROM taken",
        &[&key.id, &key.hash, &Json(key)],
    )
    .await
    .map_err(|f| key_conflict(f, &key.id).into_store())?;
    let Some(row) = taken else {
        return Ok(());
    };
    let same_id: bool = row.try_get(0).sql(&what).map_err(Fault::into_store)?;
    Err(if same_id {
        StoreError::Backend(format!("key {} already exists", key.id))
    } else {
        StoreError::DuplicateKey
    })
}

/// The key whose column `column` (`id` or `hash`) is `value`.
async fn by(store: &PgStore, column: &str, value: &str) -> Result<Option<Key>, StoreError> {
    let what = format!("read key by {column}");
    let client = store.client(&what).await?;
    let sql = format!("SELECT record::text FROM keys WHERE {column} = $1");
    let row = txn::query_opt(&client, &what, &sql, &[&value])
        .await
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
    let sql = "SELECT record::text FROM keys ORDER BY id";
    let rows = txn::query(&client, "list keys", sql, &[])
        .await
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
    let n: i64 = txn::query_one(&client, "count keys", "SELECT count(*) FROM keys", &[])
        .await
        .and_then(|row| row.try_get(0).sql("count keys"))
        .map_err(Fault::into_store)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// [`crate::Store::update_key`]: the key's row locked, `update` applied, written back unless
/// another key has its hash (checked by the statement that writes it).
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
        // The key is there (locked): nothing written means another key has the hash.
        let written = txn::execute(
            &tx,
            what,
            "UPDATE keys SET hash = $2, record = $3 WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM keys other WHERE other.hash = $2 AND other.id <> $1)",
            &[&id, &new.hash, &Json(&new)],
        )
        .await
        .map_err(|f| key_conflict(f, id))?;
        if written == 0 {
            return Err(StoreError::DuplicateKey.into());
        }
        tx.commit().await.sql(what)?;
        Ok(new)
    })
    .await
}

pub(super) async fn meta(store: &PgStore, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
    let what = format!("read meta {name}");
    let client = store.client(&what).await?;
    let sql = "SELECT value FROM meta WHERE name = $1";
    let row = txn::query_opt(&client, &what, sql, &[&name])
        .await
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
    let written = txn::execute(
        &client,
        &what,
        "INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        &[&name, &value],
    )
    .await
    .map_err(Fault::into_store)?;
    if written == 1 {
        return Ok(value.to_vec());
    }
    // Another value was there (or committed meanwhile): this statement sees it.
    let sql = "SELECT value FROM meta WHERE name = $1";
    let row = txn::query_one(&client, &what, sql, &[&name])
        .await
        .map_err(Fault::into_store)?;
    row.try_get(0).sql(&what).map_err(Fault::into_store)
}
