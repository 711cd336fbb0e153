//! Characters on PostgreSQL: one row each, written once by id and never changed.

use super::pool::PgStore;
use super::txn::{self, Fault, Sql, check_id, decode};
use crate::{Character, StoreError};

const CHARACTERS: &str = "characters";

/// [`crate::Store::create_character`]: one statement; an id in use writes nothing.
pub(super) async fn create(store: &PgStore, character: &Character) -> Result<(), StoreError> {
    check_id("character id", &character.id)?;
    let what = format!("create character {}", character.id);
    let record = serde_json::to_string(character)
        .map_err(|e| StoreError::Backend(format!("encode {what}: {e}")))?;
    let client = store.client(&what).await?;
    let written = txn::execute(
        &client,
        &what,
        "INSERT INTO characters (id, owner, record) VALUES ($1, $2, $3) \
         ON CONFLICT (id) DO NOTHING",
        &[&character.id, &character.owner, &record],
    )
    .await
    .map_err(Fault::into_store)?;
    if written == 0 {
        return Err(StoreError::Backend(format!(
            "character {} already exists",
            character.id
        )));
    }
    Ok(())
}

pub(super) async fn get(store: &PgStore, id: &str) -> Result<Option<Character>, StoreError> {
    let what = format!("read character {id}");
    let client = store.client(&what).await?;
    let sql = "SELECT record FROM characters WHERE id = $1";
    let row = txn::query_opt(&client, &what, sql, &[&id])
        .await
        .map_err(Fault::into_store)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let text: String = row.try_get(0).sql(&what).map_err(Fault::into_store)?;
    decode(CHARACTERS, &text).map(Some)
}
