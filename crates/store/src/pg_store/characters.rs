//! Characters on PostgreSQL: one row each (indexed by owner), written once by id and never
//! changed. A creation takes a transaction-scoped advisory lock of its owner before it counts
//! the owner's rows, so two creations for one owner count one after the other (the second
//! sees the first's row once it has committed) and the number is never passed; the charge of
//! its price is written in the same transaction by the ledger's own step.

use super::ledger::apply;
use super::pool::PgStore;
use super::txn::{self, Fault, Filter, Sql, big, check_id, decode, retry, unbig, unix_secs};
use crate::{Character, LedgerDraft, Order, Page, StoreError};

const CHARACTERS: &str = "characters";
/// Largest page of a listing.
const MAX_PAGE: usize = 100;

/// [`crate::Store::create_character`]: under the owner's lock, the count, the row and the
/// ledger entries, in one transaction; a refusal writes nothing.
pub(super) async fn create(
    store: &PgStore,
    character: &Character,
    max_per_owner: u64,
    ledger: &[LedgerDraft],
) -> Result<(), StoreError> {
    check_id("character id", &character.id)?;
    check_id("character owner", &character.owner)?;
    let what = format!("create character {}", character.id);
    let what = what.as_str();
    let record = serde_json::to_string(character)
        .map_err(|e| StoreError::Backend(format!("encode {what}: {e}")))?;
    let record = record.as_str();
    let at = unix_secs();
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        // The owner's lock, then its count: a statement of its own after the lock was granted,
        // so it sees every row committed before.
        txn::execute(
            &tx,
            what,
            "SELECT pg_advisory_xact_lock(hashtext('relay characters'), hashtext($1))",
            &[&character.owner],
        )
        .await?;
        let row = txn::query_one(
            &tx,
            what,
            "SELECT count(*) FROM characters WHERE owner = $1",
            &[&character.owner],
        )
        .await?;
        let held: i64 = row.try_get(0).sql(what)?;
        if unbig(held) >= max_per_owner {
            return Err(StoreError::CharacterLimit {
                owner: character.owner.clone(),
                max: max_per_owner,
            }
            .into());
        }
        let written = txn::execute(
            &tx,
            what,
            "INSERT INTO characters (id, owner, record) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
            &[&character.id, &character.owner, &record],
        )
        .await?;
        if written == 0 {
            return Err(
                StoreError::Backend(format!("character {} already exists", character.id)).into(),
            );
        }
        apply(&tx, ledger, at).await?;
        tx.commit().await.sql(what)?;
        Ok(())
    })
    .await
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

pub(super) async fn list(
    store: &PgStore,
    owner: &str,
    after: Option<&str>,
    limit: usize,
    order: Order,
) -> Result<Page<Character>, StoreError> {
    let what = "list characters";
    let limit = limit.clamp(1, MAX_PAGE);
    let (cmp, dir) = match order {
        Order::Desc => ("<", "DESC"),
        Order::Asc => (">", "ASC"),
    };
    let n = big(limit as u64 + 1);
    let mut filter = Filter::default();
    filter.and("owner = ?", &[&owner]);
    filter.and_some(&format!("id {cmp} ?"), &after);
    let limit_param = filter.param(&n);
    let (clause, params) = filter.finish();
    let sql =
        format!("SELECT record FROM characters{clause} ORDER BY id {dir} LIMIT {limit_param}");
    let client = store.client(what).await?;
    let rows = txn::query(&client, what, &sql, &params)
        .await
        .map_err(Fault::into_store)?;
    let mut items = Vec::with_capacity(rows.len());
    for row in &rows {
        let text: String = row.try_get(0).sql(what).map_err(Fault::into_store)?;
        items.push(decode(CHARACTERS, &text)?);
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    Ok(Page { items, has_more })
}

/// [`crate::Store::delete_character`]: one statement, the owner's row only.
pub(super) async fn delete(
    store: &PgStore,
    id: &str,
    owner: &str,
) -> Result<Option<Character>, StoreError> {
    let what = format!("delete character {id}");
    let client = store.client(&what).await?;
    let row = txn::query_opt(
        &client,
        &what,
        "DELETE FROM characters WHERE id = $1 AND owner = $2 RETURNING record",
        &[&id, &owner],
    )
    .await
    .map_err(Fault::into_store)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let text: String = row.try_get(0).sql(&what).map_err(Fault::into_store)?;
    decode(CHARACTERS, &text).map(Some)
}
