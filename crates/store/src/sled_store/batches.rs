//! Message batches on sled: the batch under its id (`batches`), its requests under batch id
//! `\0` index (4 bytes big-endian) (`batch_items`), the owner index (`batches_by_owner`:
//! owner `\0` batch id) and the batches not ended (`batches_open`: batch id). Recording
//! results runs one transaction over the batch trees and the ledger's, so a result and its
//! charge are written together or not at all.

use sled::transaction::TransactionalTree;

use super::idempotency::complete;
use super::index::{children, pair_key, prefix};
use super::ledger::{apply, unix_secs};
use super::record::{backend, check_id, decode, read};
use super::trees::{BATCH_ITEMS, BATCHES, KEYS, LedgerTx, SledStore};
use super::txn::{TxResult, abort, ensure_new, get, put, run};
use crate::{
    Batch, BatchItem, BatchResult, BatchStatus, IdemAnswer, IdemTicket, Key, LedgerDraft,
    LedgerKind, Order, Page, StoreError,
};

fn item_key(id: &str, index: u32) -> Vec<u8> {
    [id.as_bytes(), &[0], index.to_be_bytes().as_slice()].concat()
}

/// Writes `batch` and keeps `batches_open` in step with its status.
fn put_batch(batches: &TransactionalTree, open: &TransactionalTree, batch: &Batch) -> TxResult<()> {
    put(batches, batch.id.as_bytes(), "batch", batch)?;
    if batch.status == BatchStatus::Ended {
        open.remove(batch.id.as_bytes())?;
    } else {
        open.insert(batch.id.as_bytes(), &[][..])?;
    }
    Ok(())
}

/// [`crate::Store::create_batch`], less the flush.
/// [`crate::Store::create_batch`]; with `idem`, the key's record is completed in the same
/// transaction ([`crate::Store::create_batch_idempotent`]).
pub(super) fn create(
    store: &SledStore,
    batch: &Batch,
    items: &[BatchItem],
    idem: Option<(&IdemTicket, &IdemAnswer)>,
) -> Result<(), StoreError> {
    check_id("batch id", &batch.id)?;
    check_id("batch owner", &batch.owner)?;
    let t = &store.batches;
    run(
        "create batch",
        &(
            &t.batches,
            &t.by_owner,
            &t.items,
            &t.open,
            &store.trees.idempotency,
        ),
        |(batches, by_owner, stored, open, idempotency)| {
            if let Some((ticket, answer)) = idem {
                complete(idempotency, ticket, answer)?;
            }
            ensure_new(batches, "batch", &batch.id)?;
            put_batch(batches, open, batch)?;
            by_owner.insert(pair_key(&batch.owner, &batch.id), &[][..])?;
            for item in items {
                put(stored, &item_key(&batch.id, item.index), "batch item", item)?;
            }
            Ok(())
        },
    )
}

pub(super) fn batch(store: &SledStore, id: &str) -> Result<Option<Batch>, StoreError> {
    read(&store.batches.batches, BATCHES, id.as_bytes(), "read batch")
}

pub(super) fn list(
    store: &SledStore,
    owner: &str,
    after: Option<&str>,
    before: Option<&str>,
    limit: usize,
) -> Result<Page<Batch>, StoreError> {
    let t = &store.batches;
    // Newest first: down from `after`, or up from `before` (then turned around).
    let (cursor, order) = match (after, before) {
        (None, Some(b)) => (Some(b), Order::Asc),
        (a, _) => (a, Order::Desc),
    };
    let mut items = Vec::with_capacity(limit.min(1000));
    let mut has_more = false;
    for id in children(
        &t.by_owner,
        prefix(owner),
        cursor,
        order,
        "read batch index",
    ) {
        let id = String::from_utf8_lossy(&id?).into_owned();
        if items.len() == limit {
            has_more = true;
            break;
        }
        if let Some(b) = batch(store, &id)? {
            items.push(b);
        }
    }
    if order == Order::Asc {
        items.reverse();
    }
    Ok(Page { items, has_more })
}

pub(super) fn items(
    store: &SledStore,
    id: &str,
    from: u32,
    limit: usize,
) -> Result<Vec<BatchItem>, StoreError> {
    let start = item_key(id, from);
    let mut end = prefix(id);
    if let Some(last) = end.last_mut() {
        *last = 1;
    }
    let mut out = Vec::with_capacity(limit.min(1000));
    for entry in store.batches.items.range(start..end).take(limit) {
        let (_, bytes) = entry.map_err(|e| backend("read batch items", e))?;
        out.push(decode(BATCH_ITEMS, &bytes)?);
    }
    Ok(out)
}

/// [`crate::Store::record_batch_results`], less the flush.
pub(super) fn record(
    store: &SledStore,
    id: &str,
    results: &[BatchResult],
    now_ms: u64,
) -> Result<Batch, StoreError> {
    let t = &store.batches;
    let l = &store.trees;
    let at = unix_secs();
    run(
        "record batch results",
        &(
            &t.batches,
            &t.items,
            &t.open,
            &l.keys,
            &l.ledger,
            &l.ledger_by_task,
        ),
        |(batches, items, open, keys, ledger, ledger_by_task)| {
            let Some(mut batch): Option<Batch> = get(batches, BATCHES, id.as_bytes())? else {
                return abort(StoreError::BatchNotFound(id.to_owned()));
            };
            if batch.status == BatchStatus::Ended {
                return Ok(batch);
            }
            let tx = LedgerTx {
                keys,
                ledger,
                ledger_by_task,
            };
            for result in results {
                let key = item_key(id, result.index);
                let Some(mut item): Option<BatchItem> = get(items, BATCH_ITEMS, &key)? else {
                    continue;
                };
                if item.result.is_some() {
                    continue;
                }
                if let Some(charge) = &result.charge {
                    let owner: Option<Key> = get(keys, KEYS, charge.key_id.as_bytes())?;
                    if let Some(owner) = owner {
                        let take = match owner.quota {
                            Some(left) => charge.amount.clamp(0, left.max(0)),
                            None => charge.amount.max(0),
                        };
                        let draft = LedgerDraft {
                            key_id: charge.key_id.clone(),
                            task_id: charge.task_id.clone(),
                            kind: LedgerKind::Charge,
                            amount: -take,
                        };
                        apply(&tx, std::slice::from_ref(&draft), at)?;
                    }
                }
                item.result = Some(result.outcome.clone());
                put(items, &key, "batch item", &item)?;
                batch.counts.record(result.outcome.kind);
            }
            if batch.counts.processing == 0 {
                batch.status = BatchStatus::Ended;
                batch.ended_ms = Some(now_ms);
            }
            put_batch(batches, open, &batch)?;
            Ok(batch)
        },
    )
}

/// [`crate::Store::cancel_batch`], less the flush.
pub(super) fn cancel(
    store: &SledStore,
    id: &str,
    now_ms: u64,
) -> Result<Option<Batch>, StoreError> {
    let t = &store.batches;
    run("cancel batch", &(&t.batches, &t.open), |(batches, open)| {
        let Some(mut batch): Option<Batch> = get(batches, BATCHES, id.as_bytes())? else {
            return Ok(None);
        };
        if batch.status == BatchStatus::InProgress {
            batch.status = BatchStatus::Canceling;
            batch.cancel_ms = Some(now_ms);
            put_batch(batches, open, &batch)?;
        }
        Ok(Some(batch))
    })
}

/// [`crate::Store::delete_batch`], less the flush.
pub(super) fn delete(store: &SledStore, id: &str) -> Result<Option<Batch>, StoreError> {
    let t = &store.batches;
    // Transactions cannot range over a tree: the item keys are read first (a batch's requests
    // never change in number).
    let mut keys = Vec::new();
    for key in t.items.scan_prefix(prefix(id)).keys() {
        keys.push(key.map_err(|e| backend("read batch items", e))?);
    }
    run(
        "delete batch",
        &(&t.batches, &t.by_owner, &t.items, &t.open),
        |(batches, by_owner, items, open)| {
            let Some(batch): Option<Batch> = get(batches, BATCHES, id.as_bytes())? else {
                return Ok(None);
            };
            batches.remove(id.as_bytes())?;
            open.remove(id.as_bytes())?;
            by_owner.remove(pair_key(&batch.owner, id))?;
            for key in &keys {
                items.remove(key)?;
            }
            Ok(Some(batch))
        },
    )
}

pub(super) fn open_batches(store: &SledStore, limit: usize) -> Result<Vec<Batch>, StoreError> {
    let mut out = Vec::new();
    for key in store.batches.open.iter().keys().take(limit) {
        let key = key.map_err(|e| backend("read open batches", e))?;
        if let Some(b) = batch(store, &String::from_utf8_lossy(&key))? {
            out.push(b);
        }
    }
    Ok(out)
}
