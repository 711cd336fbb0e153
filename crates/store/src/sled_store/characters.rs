//! Characters: one record each, written once by id (a compare-and-swap from absent) and never
//! changed; the caller flushes.

use super::record::{backend, check_id, encode, read};
use super::trees::{CHARACTERS, SledStore};
use crate::{Character, StoreError};

/// [`crate::Store::create_character`] without the flush.
pub(super) fn create(store: &SledStore, character: &Character) -> Result<(), StoreError> {
    check_id("character id", &character.id)?;
    let what = format!("create character {}", character.id);
    let bytes = encode(&what, character)?;
    let cas = store
        .characters
        .compare_and_swap(character.id.as_bytes(), None::<&[u8]>, Some(bytes))
        .map_err(|e| backend(&what, e))?;
    cas.map_err(|_| StoreError::Backend(format!("character {} already exists", character.id)))
}

pub(super) fn get(store: &SledStore, id: &str) -> Result<Option<Character>, StoreError> {
    read(
        &store.characters,
        CHARACTERS,
        id.as_bytes(),
        &format!("read character {id}"),
    )
}
