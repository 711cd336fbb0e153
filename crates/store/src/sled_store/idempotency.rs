//! Idempotency records on sled: the record under API key id `\0` idempotency key
//! (`idempotency`), and the index by claim time (`idempotency_by_time`: the time, then the
//! record's key) that the sweep reads. Both trees are in the task transaction's set, so a task's
//! creation completes its record in the same transaction ([`complete`]); an asset's creation
//! runs over the asset trees and `idempotency` together.

use sled::transaction::TransactionalTree;

use super::index::{move_entry, pair_key, split_time_key, time_key};
use super::record::{backend, check_id};
use super::trees::{IDEMPOTENCY, IDEMPOTENCY_BY_TIME, SledStore};
use super::txn::{TxResult, abort, get, or_abort, put};
use crate::idempotency::{Decision, decide, held_by};
use crate::{IdemAnswer, IdemClaim, IdemRecord, IdemTicket, StoreError};

fn record_key(ticket: &IdemTicket) -> Vec<u8> {
    pair_key(&ticket.key_id, &ticket.key)
}

fn time_entry(record: &IdemRecord) -> Vec<u8> {
    time_key(record.created_ms, &pair_key(&record.key_id, &record.key))
}

fn check(ticket: &IdemTicket) -> Result<(), StoreError> {
    check_id("idempotency key owner", &ticket.key_id)?;
    check_id("idempotency key", &ticket.key)
}

/// [`crate::Store::claim_idempotency`].
pub(super) fn claim(
    store: &SledStore,
    ticket: &IdemTicket,
    fingerprint: &str,
    now_ms: u64,
) -> Result<IdemClaim, StoreError> {
    check(ticket)?;
    let id = record_key(ticket);
    store.trees.tx("claim an idempotency key", |tx| {
        let old: Option<IdemRecord> = get(tx.idempotency, IDEMPOTENCY, &id)?;
        match decide(old.as_ref(), ticket, fingerprint, now_ms) {
            Decision::Answer(found) => Ok(found),
            Decision::Write(new) => {
                move_entry(
                    tx.idempotency_by_time,
                    old.as_ref().map(time_entry),
                    Some(time_entry(&new)),
                )?;
                put(tx.idempotency, &id, "idempotency record", &new)?;
                Ok(IdemClaim::Claimed)
            }
        }
    })
}

/// Completes `ticket`'s record (in the `idempotency` tree of a transaction) with `answer`,
/// inside a task's or an asset's creation; a record no longer held by the ticket aborts it.
pub(super) fn complete(
    idempotency: &TransactionalTree,
    ticket: &IdemTicket,
    answer: &IdemAnswer,
) -> TxResult<()> {
    let held = held(idempotency, ticket)?;
    write_answer(idempotency, held, answer)
}

/// `ticket`'s record while the ticket holds it, read to be completed by [`write_answer`];
/// a record no longer held by the ticket aborts.
pub(super) fn held(idempotency: &TransactionalTree, ticket: &IdemTicket) -> TxResult<Held> {
    let id = record_key(ticket);
    let old: Option<IdemRecord> = get(idempotency, IDEMPOTENCY, &id)?;
    match old {
        Some(record) if held_by(Some(&record), ticket) => Ok(Held { id, record }),
        _ => abort(StoreError::IdempotencyLost(ticket.key.clone())),
    }
}

/// A record its ticket holds, as [`held`] read it.
pub(super) struct Held {
    id: Vec<u8>,
    record: IdemRecord,
}

/// Writes `answer` into the record [`held`] read.
pub(super) fn write_answer(
    idempotency: &TransactionalTree,
    held: Held,
    answer: &IdemAnswer,
) -> TxResult<()> {
    let Held { id, mut record } = held;
    record.answer = Some(answer.clone());
    put(idempotency, &id, "idempotency record", &record)
}

/// [`crate::Store::finish_idempotency`] (the caller flushes).
pub(super) fn finish(
    store: &SledStore,
    ticket: &IdemTicket,
    answer: Option<&IdemAnswer>,
) -> Result<(), StoreError> {
    check(ticket)?;
    store
        .trees
        .tx("finish an idempotency claim", |tx| match answer {
            Some(answer) => complete(tx.idempotency, ticket, answer),
            None => {
                let id = record_key(ticket);
                let old: Option<IdemRecord> = get(tx.idempotency, IDEMPOTENCY, &id)?;
                match old {
                    Some(record) if held_by(Some(&record), ticket) => {
                        tx.idempotency.remove(id)?;
                        tx.idempotency_by_time.remove(time_entry(&record))?;
                        Ok(())
                    }
                    _ => abort(StoreError::IdempotencyLost(ticket.key.clone())),
                }
            }
        })
}

/// [`crate::Store::sweep_idempotency`]: the oldest index entries before `before_ms`, removed
/// in one transaction (an entry whose record was claimed again since is only unindexed).
pub(super) fn sweep(store: &SledStore, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
    let mut entries = Vec::new();
    for key in store.trees.idempotency_by_time.iter().keys().take(limit) {
        let key = key.map_err(|e| backend("read idempotency index", e))?;
        let (ms, _) = split_time_key(&key, IDEMPOTENCY_BY_TIME, "idempotency key too short")?;
        if ms >= before_ms {
            break;
        }
        entries.push(key.to_vec());
    }
    if entries.is_empty() {
        return Ok(0);
    }
    store.trees.tx("sweep idempotency records", |tx| {
        let mut removed = 0;
        for entry in &entries {
            let (ms, id) = or_abort(split_time_key(
                entry,
                IDEMPOTENCY_BY_TIME,
                "idempotency key too short",
            ))?;
            tx.idempotency_by_time.remove(entry.as_slice())?;
            let record: Option<IdemRecord> = get(tx.idempotency, IDEMPOTENCY, id)?;
            if record.is_some_and(|r| r.created_ms == ms) {
                tx.idempotency.remove(id)?;
                removed += 1;
            }
        }
        Ok(removed)
    })
}
