//! Message batches on PostgreSQL: `batches` (the record as jsonb, `open` until it ended) and
//! `batch_items` (each request as JSON text, by its place). Recording results locks the
//! batch's row, so two recorders of one batch run one after the other; each result is written
//! with its charge's ledger entry in the same transaction.

use deadpool_postgres::Transaction;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use super::idempotency::complete;
use super::ledger::{apply, lock_key};
use super::pool::PgStore;
use super::txn::{self, Fault, Sql, big, check_id, decode, unix_secs};
use crate::{
    Batch, BatchItem, BatchResult, BatchStatus, IdemAnswer, IdemTicket, LedgerDraft, LedgerKind,
    Page, StoreError,
};

const BATCHES: &str = "batches";
const BATCH_ITEMS: &str = "batch_items";
/// The most batches one listing reads.
const MAX_PAGE: usize = 1000;

fn text<T: serde::de::DeserializeOwned>(
    table: &'static str,
    row: &Row,
    what: &str,
) -> Result<T, Fault> {
    let text: String = row.try_get(0).sql(what)?;
    Ok(decode(table, &text)?)
}

fn all<T: serde::de::DeserializeOwned>(
    table: &'static str,
    rows: &[Row],
    what: &str,
) -> Result<Vec<T>, StoreError> {
    rows.iter()
        .map(|row| text(table, row, what))
        .collect::<Result<_, _>>()
        .map_err(Fault::into_store)
}

/// A request as the JSON text its row keeps.
fn item_text(item: &BatchItem) -> Result<String, StoreError> {
    serde_json::to_string(item).map_err(|e| StoreError::Backend(format!("encode batch item: {e}")))
}

/// [`crate::Store::create_batch`]; with `idem`, also
/// [`crate::Store::create_batch_idempotent`]'s completion of the key's record.
pub(super) async fn create(
    store: &PgStore,
    batch: &Batch,
    items: &[BatchItem],
    idem: Option<(&IdemTicket, &IdemAnswer)>,
) -> Result<(), StoreError> {
    check_id("batch id", &batch.id)?;
    check_id("batch owner", &batch.owner)?;
    let what = format!("create batch {}", batch.id);
    let idx: Vec<i32> = items
        .iter()
        .map(|i| i32::try_from(i.index).unwrap_or(i32::MAX))
        .collect();
    let texts: Vec<String> = items.iter().map(item_text).collect::<Result<_, _>>()?;
    let open = batch.status != BatchStatus::Ended;
    txn::retry(&what, || async {
        let mut client = store.client(&what).await?;
        let tx = client.transaction().await.sql(&what)?;
        if let Some((ticket, answer)) = idem {
            complete(&tx, ticket, answer).await?;
        }
        let written = txn::execute(
            &tx,
            &what,
            "INSERT INTO batches (id, owner, open, record) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO NOTHING",
            &[&batch.id, &batch.owner, &open, &Json(batch)],
        )
        .await?;
        if written == 0 {
            return Err(StoreError::Backend(format!("batch {} already exists", batch.id)).into());
        }
        txn::execute(
            &tx,
            &what,
            "INSERT INTO batch_items (batch_id, idx, item) \
             SELECT $1, i.idx, i.item FROM unnest($2::int[], $3::text[]) AS i(idx, item)",
            &[&batch.id, &idx, &texts],
        )
        .await?;
        tx.commit().await.sql(&what)?;
        Ok(())
    })
    .await
}

pub(super) async fn batch(store: &PgStore, id: &str) -> Result<Option<Batch>, StoreError> {
    let what = "read batch";
    let client = store.client(what).await?;
    let rows = txn::query(
        &client,
        what,
        "SELECT record::text FROM batches WHERE id = $1",
        &[&id],
    )
    .await
    .map_err(Fault::into_store)?;
    Ok(all(BATCHES, &rows, what)?.pop())
}

pub(super) async fn list(
    store: &PgStore,
    owner: &str,
    after: Option<&str>,
    before: Option<&str>,
    limit: usize,
) -> Result<Page<Batch>, StoreError> {
    let what = "list batches";
    let limit = limit.clamp(1, MAX_PAGE);
    let n = big(limit as u64 + 1);
    let client = store.client(what).await?;
    // Newest first: down from `after`, or up from `before` (then turned around).
    let (rows, upward) = match (after, before) {
        (None, Some(b)) => (
            txn::query(
                &client,
                what,
                "SELECT record::text FROM batches WHERE owner = $1 AND id > $2 \
                 ORDER BY id ASC LIMIT $3",
                &[&owner, &b, &n],
            )
            .await,
            true,
        ),
        (Some(a), _) => (
            txn::query(
                &client,
                what,
                "SELECT record::text FROM batches WHERE owner = $1 AND id < $2 \
                 ORDER BY id DESC LIMIT $3",
                &[&owner, &a, &n],
            )
            .await,
            false,
        ),
        (None, None) => (
            txn::query(
                &client,
                what,
                "SELECT record::text FROM batches WHERE owner = $1 ORDER BY id DESC LIMIT $2",
                &[&owner, &n],
            )
            .await,
            false,
        ),
    };
    let mut items: Vec<Batch> = all(BATCHES, &rows.map_err(Fault::into_store)?, what)?;
    let has_more = items.len() > limit;
    items.truncate(limit);
    if upward {
        items.reverse();
    }
    Ok(Page { items, has_more })
}

pub(super) async fn items(
    store: &PgStore,
    id: &str,
    from: u32,
    limit: usize,
) -> Result<Vec<BatchItem>, StoreError> {
    let what = "read batch items";
    let client = store.client(what).await?;
    let from = i32::try_from(from).unwrap_or(i32::MAX);
    let n = big(limit as u64);
    let rows = txn::query(
        &client,
        what,
        "SELECT item FROM batch_items WHERE batch_id = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
        &[&id, &from, &n],
    )
    .await
    .map_err(Fault::into_store)?;
    all(BATCH_ITEMS, &rows, what)
}

async fn lock_batch(tx: &Transaction<'_>, id: &str, what: &str) -> Result<Option<Batch>, Fault> {
    let row = txn::query_opt(
        tx,
        what,
        "SELECT record::text FROM batches WHERE id = $1 FOR UPDATE",
        &[&id],
    )
    .await?;
    row.map(|row| text(BATCHES, &row, what)).transpose()
}

async fn write_batch(tx: &Transaction<'_>, batch: &Batch, what: &str) -> Result<(), Fault> {
    let open = batch.status != BatchStatus::Ended;
    txn::execute(
        tx,
        what,
        "UPDATE batches SET open = $2, record = $3 WHERE id = $1",
        &[&batch.id, &open, &Json(batch)],
    )
    .await?;
    Ok(())
}

/// [`crate::Store::record_batch_results`].
pub(super) async fn record(
    store: &PgStore,
    id: &str,
    results: &[BatchResult],
    now_ms: u64,
) -> Result<Batch, StoreError> {
    let what = format!("record results of batch {id}");
    let what = what.as_str();
    let at = unix_secs();
    txn::retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let Some(mut batch) = lock_batch(&tx, id, what).await? else {
            return Err(StoreError::BatchNotFound(id.to_owned()).into());
        };
        if batch.status == BatchStatus::Ended {
            tx.commit().await.sql(what)?;
            return Ok(batch);
        }
        let idx: Vec<i32> = results
            .iter()
            .map(|r| i32::try_from(r.index).unwrap_or(i32::MAX))
            .collect();
        let rows = txn::query(
            &tx,
            what,
            "SELECT item FROM batch_items WHERE batch_id = $1 AND idx = ANY($2) ORDER BY idx",
            &[&id, &idx],
        )
        .await?;
        let mut found: Vec<BatchItem> = Vec::with_capacity(rows.len());
        for row in &rows {
            found.push(text(BATCH_ITEMS, row, what)?);
        }
        for result in results {
            let Some(item) = found.iter_mut().find(|i| i.index == result.index) else {
                continue;
            };
            if item.result.is_some() {
                continue;
            }
            if let Some(charge) = &result.charge
                && let Some(key) = lock_key(&tx, &charge.key_id, what).await?
            {
                let take = match key.quota {
                    Some(left) => charge.amount.clamp(0, left.max(0)),
                    None => charge.amount.max(0),
                };
                let draft = LedgerDraft {
                    key_id: charge.key_id.clone(),
                    task_id: charge.task_id.clone(),
                    kind: LedgerKind::Charge,
                    amount: -take,
                };
                apply(&tx, std::slice::from_ref(&draft), at).await?;
            }
            item.result = Some(result.outcome.clone());
            let text = item_text(item)?;
            let index = i32::try_from(item.index).unwrap_or(i32::MAX);
            txn::execute(
                &tx,
                what,
                "UPDATE batch_items SET item = $3 WHERE batch_id = $1 AND idx = $2",
                &[&id, &index, &text],
            )
            .await?;
            batch.counts.record(result.outcome.kind);
        }
        if batch.counts.processing == 0 {
            batch.status = BatchStatus::Ended;
            batch.ended_ms = Some(now_ms);
        }
        write_batch(&tx, &batch, what).await?;
        tx.commit().await.sql(what)?;
        Ok(batch)
    })
    .await
}

/// [`crate::Store::cancel_batch`].
pub(super) async fn cancel(
    store: &PgStore,
    id: &str,
    now_ms: u64,
) -> Result<Option<Batch>, StoreError> {
    let what = format!("cancel batch {id}");
    let what = what.as_str();
    txn::retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let Some(mut batch) = lock_batch(&tx, id, what).await? else {
            return Ok(None);
        };
        if batch.status == BatchStatus::InProgress {
            batch.status = BatchStatus::Canceling;
            batch.cancel_ms = Some(now_ms);
            write_batch(&tx, &batch, what).await?;
        }
        tx.commit().await.sql(what)?;
        Ok(Some(batch))
    })
    .await
}

/// [`crate::Store::delete_batch`].
pub(super) async fn delete(store: &PgStore, id: &str) -> Result<Option<Batch>, StoreError> {
    let what = format!("delete batch {id}");
    let what = what.as_str();
    txn::retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let row = txn::query_opt(
            &tx,
            what,
            "DELETE FROM batches WHERE id = $1 RETURNING record::text",
            &[&id],
        )
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let batch: Batch = text(BATCHES, &row, what)?;
        txn::execute(
            &tx,
            what,
            "DELETE FROM batch_items WHERE batch_id = $1",
            &[&id],
        )
        .await?;
        tx.commit().await.sql(what)?;
        Ok(Some(batch))
    })
    .await
}

pub(super) async fn open_batches(store: &PgStore, limit: usize) -> Result<Vec<Batch>, StoreError> {
    let what = "read open batches";
    let client = store.client(what).await?;
    let n = big(limit as u64);
    let rows = txn::query(
        &client,
        what,
        "SELECT record::text FROM batches WHERE open ORDER BY id LIMIT $1",
        &[&n],
    )
    .await
    .map_err(Fault::into_store)?;
    all(BATCHES, &rows, what)
}
