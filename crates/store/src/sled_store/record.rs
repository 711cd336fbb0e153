//! What every tree shares: opening it by name, records as JSON (one that does not decode is
//! [`StoreError::Corrupt`]), reading one record outside a transaction, sled's errors as the
//! store's, and the rule for ids that are parts of index keys.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::{Db, Tree};

use crate::StoreError;

pub(super) fn open_tree(db: &Db, name: &'static str) -> Result<Tree, StoreError> {
    db.open_tree(name)
        .map_err(|e| StoreError::Backend(format!("open tree {name}: {e}")))
}

/// The record under `id` in `tree` (whose name is `name`), if any; `what` names the read in
/// an error.
pub(super) fn read<T: DeserializeOwned>(
    tree: &Tree,
    name: &'static str,
    id: &[u8],
    what: &str,
) -> Result<Option<T>, StoreError> {
    match tree.get(id) {
        Ok(Some(bytes)) => decode(name, &bytes).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(backend(what, e)),
    }
}

pub(super) fn backend(what: &str, e: sled::Error) -> StoreError {
    StoreError::Backend(format!("{what}: {e}"))
}

pub(super) fn decode<T: DeserializeOwned>(
    tree: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Corrupt { tree, source })
}

pub(super) fn encode<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Backend(format!("encode {what}: {e}")))
}

pub(super) fn corrupt(tree: &'static str, msg: &str) -> StoreError {
    StoreError::Corrupt {
        tree,
        source: <serde_json::Error as serde::de::Error>::custom(msg),
    }
}

/// Ids are parts of index keys separated by NUL; an empty one would make prefixes ambiguous.
pub(super) fn check_id(what: &str, id: &str) -> Result<(), StoreError> {
    if id.is_empty() || id.contains('\0') {
        return Err(StoreError::Backend(format!(
            "{what} {id:?} is empty or contains NUL"
        )));
    }
    Ok(())
}
