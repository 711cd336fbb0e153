//! Keys (by id, and by the hash of their secret, kept unique) and the small named values of
//! `meta`.

use super::record::{backend, check_id, decode, encode, read};
use super::trees::{KEYS, SledStore};
use super::txn::{abort, ensure_new, get, put};
use crate::steps::KeyUpdate;
use crate::{Key, StoreError};

/// [`crate::Store::create_key`].
pub(super) fn create(store: &SledStore, key: &Key) -> Result<(), StoreError> {
    check_id("key id", &key.id)?;
    let bytes = encode("key", key)?;
    let what = format!("create key {}", key.id);
    store.trees.tx(&what, |tx| {
        ensure_new(tx.keys, "key", &key.id)?;
        if tx.keys_by_hash.get(key.hash.as_bytes())?.is_some() {
            return abort(StoreError::DuplicateKey);
        }
        tx.keys.insert(key.id.as_bytes(), bytes.as_slice())?;
        tx.keys_by_hash
            .insert(key.hash.as_bytes(), key.id.as_bytes())?;
        Ok(())
    })
}

pub(super) fn get_by_id(store: &SledStore, id: &str) -> Result<Option<Key>, StoreError> {
    read(&store.trees.keys, KEYS, id.as_bytes(), "read key")
}

/// [`crate::Store::key_by_hash`].
pub(super) fn by_hash(store: &SledStore, hash: &str) -> Result<Option<Key>, StoreError> {
    let id = store
        .trees
        .keys_by_hash
        .get(hash.as_bytes())
        .map_err(|e| backend("read key hash index", e))?;
    let Some(id) = id else { return Ok(None) };
    let key = read(&store.trees.keys, KEYS, &id, "read key")?;
    if key.is_none() {
        tracing::warn!(key = %String::from_utf8_lossy(&id), "hash index entry without a key");
    }
    Ok(key)
}

pub(super) fn all(store: &SledStore) -> Result<Vec<Key>, StoreError> {
    let mut out = Vec::new();
    for item in store.trees.keys.iter().values() {
        let bytes = item.map_err(|e| backend("list keys", e))?;
        out.push(decode(KEYS, &bytes)?);
    }
    Ok(out)
}

/// [`crate::Store::update_key`].
pub(super) fn update(
    store: &SledStore,
    id: &str,
    update: KeyUpdate<'_>,
) -> Result<Key, StoreError> {
    let what = format!("update key {id}");
    store.trees.tx(&what, |tx| {
        let Some(old): Option<Key> = get(tx.keys, KEYS, id.as_bytes())? else {
            return abort(StoreError::KeyNotFound(id.to_owned()));
        };
        let mut new = old.clone();
        update(&mut new);
        new.id.clone_from(&old.id);
        if new.hash != old.hash {
            if tx.keys_by_hash.get(new.hash.as_bytes())?.is_some() {
                return abort(StoreError::DuplicateKey);
            }
            tx.keys_by_hash.remove(old.hash.as_bytes())?;
            tx.keys_by_hash
                .insert(new.hash.as_bytes(), new.id.as_bytes())?;
        }
        put(tx.keys, id.as_bytes(), "key", &new)?;
        Ok(new)
    })
}

pub(super) fn meta(store: &SledStore, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
    store
        .meta
        .get(name.as_bytes())
        .map(|v| v.map(|v| v.to_vec()))
        .map_err(|e| backend(&format!("read meta {name}"), e))
}

/// [`crate::Store::meta_init`]: the value now stored, and whether it is `value`, written now
/// (and to be flushed).
pub(super) fn meta_init(
    store: &SledStore,
    name: &str,
    value: &[u8],
) -> Result<(Vec<u8>, bool), StoreError> {
    let what = format!("init meta {name}");
    let cas = store
        .meta
        .compare_and_swap(name.as_bytes(), None::<&[u8]>, Some(value))
        .map_err(|e| backend(&what, e))?;
    match cas {
        Ok(()) => Ok((value.to_vec(), true)),
        Err(e) => match e.current {
            Some(current) => Ok((current.to_vec(), false)),
            // The meta tree is never removed from; a CAS from "absent" fails only when a
            // value is there.
            None => Err(StoreError::Backend(format!(
                "{what}: compare-and-swap failed without a current value"
            ))),
        },
    }
}
