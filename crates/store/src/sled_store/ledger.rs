//! The ledger steps: a task step's drafts (pre-deduction, settlement, refund) taken from or
//! given back to their key's quota, one entry each, unique per `(task_id, kind)`; the charges
//! of work without a task; a key's ledger.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use sled::transaction::ConflictableTransactionError;
use ulid::Ulid;

use super::record::{backend, check_id, decode, encode};
use super::trees::{KEYS, LEDGER, LedgerTx, SledStore};
use super::txn::{TxResult, abort, get, or_abort, put};
use super::usage_chunk::{self, Charged};
use super::usage_log::{self, OpenRun};
use crate::{Charge, Key, LedgerDraft, LedgerEntry, LedgerKind, StoreError};

/// Applies ledger drafts inside a transaction: checks `(task_id, kind)` uniqueness, moves the
/// key's quota, writes the entries. Everything is checked before anything is written, so an
/// abort leaves the transaction as it found it ([`prepare`], then [`write`]).
pub(super) fn apply(tx: &LedgerTx<'_>, drafts: &[LedgerDraft], at: u64) -> TxResult<()> {
    let prepared = prepare(tx, drafts, at)?;
    write(tx, prepared)
}

/// Ledger drafts checked and encoded, ready to be written: each entry, its `ledger_by_task`
/// key, and its key's record after it.
pub(super) struct Prepared {
    entries: Vec<(Vec<u8>, LedgerEntry, Vec<u8>)>,
    keys: Vec<(String, Vec<u8>)>,
}

/// Checks `drafts` against the transaction's view (each `(task_id, kind)` new, its key there,
/// the quota enough for what it takes) and encodes what [`write`] writes; reads only, so an
/// abort here leaves nothing of the drafts written.
pub(super) fn prepare(tx: &LedgerTx<'_>, drafts: &[LedgerDraft], at: u64) -> TxResult<Prepared> {
    let mut keys: Vec<(&str, Key)> = Vec::new();
    let mut entries: Vec<(Vec<u8>, LedgerEntry, Vec<u8>)> = Vec::with_capacity(drafts.len());
    for draft in drafts {
        let by_task = by_task_key(&draft.task_id, draft.kind);
        let twice = entries.iter().any(|(seen, ..)| *seen == by_task);
        if twice || tx.ledger_by_task.get(by_task.as_slice())?.is_some() {
            return abort(StoreError::DuplicateLedger {
                task_id: draft.task_id.clone(),
                kind: draft.kind,
            });
        }
        let at_key = match keys.iter().position(|(id, _)| *id == draft.key_id) {
            Some(i) => i,
            None => {
                let Some(key): Option<Key> = get(tx.keys, KEYS, draft.key_id.as_bytes())? else {
                    return abort(StoreError::KeyNotFound(draft.key_id.clone()));
                };
                keys.push((&draft.key_id, key));
                keys.len() - 1
            }
        };
        let key = &mut keys[at_key].1;
        let overflow = || {
            ConflictableTransactionError::Abort(StoreError::Backend(format!(
                "ledger {} on key {}: amount {} overflows the quota",
                draft.kind.as_str(),
                draft.key_id,
                draft.amount
            )))
        };
        let balance_after = match key.quota {
            Some(remaining) => {
                let after = remaining.checked_add(draft.amount).ok_or_else(overflow)?;
                if draft.amount < 0 && after < 0 {
                    return abort(StoreError::InsufficientQuota {
                        key_id: draft.key_id.clone(),
                        needed: draft.amount.saturating_neg(),
                        remaining,
                    });
                }
                Some(after)
            }
            None => None,
        };
        key.quota = balance_after;
        key.quota_used = key
            .quota_used
            .checked_sub(draft.amount)
            .ok_or_else(overflow)?;
        let entry = LedgerEntry {
            id: format!("led_{}", Ulid::new()),
            key_id: draft.key_id.clone(),
            task_id: draft.task_id.clone(),
            kind: draft.kind,
            amount: draft.amount,
            balance_after,
            at,
        };
        let bytes = or_abort(encode("ledger entry", &entry))?;
        entries.push((by_task, entry, bytes));
    }
    let mut encoded = Vec::with_capacity(keys.len());
    for (id, key) in keys {
        encoded.push((id.to_owned(), or_abort(encode("key", &key))?));
    }
    Ok(Prepared {
        entries,
        keys: encoded,
    })
}

/// Writes what [`prepare`] checked: each entry under the next sequence number of its key, its
/// `ledger_by_task` index entry, and the keys. Only sled itself can fail here.
pub(super) fn write(tx: &LedgerTx<'_>, prepared: Prepared) -> TxResult<()> {
    for (by_task, entry, bytes) in prepared.entries {
        let seq = tx.ledger.generate_id()?;
        let ledger_key = [entry.key_id.as_bytes(), &[0], seq.to_be_bytes().as_slice()].concat();
        tx.ledger.insert(ledger_key, bytes)?;
        tx.ledger_by_task.insert(by_task, entry.id.as_bytes())?;
    }
    for (id, bytes) in prepared.keys {
        tx.keys.insert(id.as_bytes(), bytes)?;
    }
    Ok(())
}

/// Charge entries per chunk of the usage log: a batch of charges costs one insert per chunk
/// and key in it, not one per charge, so a busy chat path writes little. As large as the
/// server's batches (1,024 charges), so that a batch is one chunk: every place in
/// `usage_by_key` is an entry of sled's tree, held in memory, and with chunks of 64 a busy
/// chat path (about 50,000 messages a second in 100 batches) added about 900 a second where
/// one chunk per batch adds 100. Reading a key's ledger decodes the whole chunks that hold its
/// entries, the other keys' entries in them included.
const USAGE_CHUNK: usize = 1024;

/// [`crate::Store::charges`]: each charge takes what its key has left at the most, in one
/// transaction, not flushed. The entries go to the usage log's file in chunks (see
/// [`USAGE_CHUNK`] and [`usage_log`]); each key is read and written once per batch. Charge ids
/// are the caller's, minted once each (a message's id): they are checked within the batch,
/// with no index to keep per charge.
pub(super) fn charges(store: &SledStore, charges: &[Charge]) -> Result<Vec<i64>, StoreError> {
    let at = unix_secs();
    let log = &store.usage_log;
    let mut end = log.end();
    // The open runs of the batch's keys, looked up once a key and process.
    for charge in charges {
        if !end.runs.contains_key(&charge.key_id) {
            let run = open_run(store, &charge.key_id)?;
            end.runs.insert(charge.key_id.clone(), run);
        }
    }
    let tail = &*end;
    let (taken, new_end, runs) = store.charge_tx("charges", |tx| {
        // Key and charge ids are the relay's own: a fast hash (keyed per process) is enough.
        let mut keys: foldhash::HashMap<&str, Key> = HashMap::default();
        let mut taken = Vec::with_capacity(charges.len());
        let mut entries = Vec::with_capacity(charges.len());
        let mut ids: foldhash::HashSet<&str> =
            HashSet::with_capacity_and_hasher(charges.len(), Default::default());
        // The batch's entry ids: one drawn, the rest each the next (ULIDs are monotonic so).
        let mut entry_id = Ulid::new();
        let mut next_id = move || {
            let id = entry_id;
            // A random part at its largest has no next: a new draw (not the nil default).
            entry_id = match entry_id.increment() {
                Some(next) => next,
                None => Ulid::new(),
            };
            id
        };
        for charge in charges {
            if check_id("charge id", &charge.task_id).is_err()
                || !ids.insert(charge.task_id.as_str())
            {
                taken.push(0);
                continue;
            }
            let key = match keys.entry(charge.key_id.as_str()) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => match get(tx.keys, KEYS, charge.key_id.as_bytes())? {
                    Some(key) => e.insert(key),
                    None => {
                        taken.push(0);
                        continue;
                    }
                },
            };
            let take = match key.quota {
                Some(remaining) => charge.amount.clamp(0, remaining.max(0)),
                None => charge.amount.max(0),
            };
            key.quota = key.quota.map(|q| q - take);
            key.quota_used = key.quota_used.saturating_add(take);
            entries.push(Charged {
                id: next_id(),
                key_id: &charge.key_id,
                task_id: &charge.task_id,
                amount: -take,
                balance_after: key.quota,
                at,
            });
            taken.push(take);
        }
        // Written at the committed end each time the transaction runs: a run that does not
        // commit leaves bytes past the end for the next batch to overwrite. The runs the
        // transaction moves are applied to `tail` only once it has committed.
        let mut write_at = tail.at;
        let mut moved: Vec<(&str, OpenRun)> = Vec::new();
        for chunk in entries.chunks(USAGE_CHUNK) {
            let seq = tx.usage.generate_id()?;
            let bytes = or_abort(usage_chunk::encode(chunk))?;
            or_abort(log.write_at(&bytes, write_at))?;
            let len = bytes.len() as u64;
            let mut holders: Vec<&str> = Vec::new();
            for entry in chunk {
                if holders.contains(&entry.key_id) {
                    continue;
                }
                holders.push(entry.key_id);
                let open = match moved.iter().rev().find(|(k, _)| *k == entry.key_id) {
                    Some((_, run)) => Some(run.clone()),
                    None => tail.runs.get(entry.key_id).cloned().flatten(),
                };
                let open = open.filter(|run| run.chunks < usage_log::RUN_CHUNKS);
                let (index_key, before) = match open {
                    Some(run) => {
                        let before = tx.usage_by_key.get(&run.index_key)?;
                        (run.index_key, before)
                    }
                    None => {
                        let mut key = key_prefix(entry.key_id);
                        key.extend_from_slice(&seq.to_be_bytes());
                        (key, None)
                    }
                };
                let value = usage_log::run_with(before.as_deref(), seq, write_at, len);
                let chunks = usage_log::chunks_in(&value);
                tx.usage_by_key.insert(&index_key[..], value)?;
                moved.push((entry.key_id, OpenRun { index_key, chunks }));
            }
            write_at += len;
        }
        if write_at != tail.at {
            tx.usage.insert(usage_log::END, &write_at.to_be_bytes())?;
        }
        for (id, key) in &keys {
            put(tx.keys, id.as_bytes(), "key", key)?;
        }
        let moved: Vec<(String, OpenRun)> =
            moved.into_iter().map(|(k, r)| (k.to_owned(), r)).collect();
        Ok((taken, write_at, moved))
    })?;
    end.at = new_end;
    for (key_id, run) in runs {
        end.runs.insert(key_id, Some(run));
    }
    Ok(taken)
}

/// `key_id \0`: what a key's entries in `ledger` and `usage_by_key` begin with (a sequence
/// number follows).
fn key_prefix(key_id: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(key_id.len() + 9);
    prefix.extend_from_slice(key_id.as_bytes());
    prefix.push(0);
    prefix
}

/// The run a key's next chunk extends: its last `usage_by_key` entry when that is a run with
/// room left (one of any other form, or a full run, is left as it is).
fn open_run(store: &SledStore, key_id: &str) -> Result<Option<OpenRun>, StoreError> {
    let last = store
        .usage_by_key
        .scan_prefix(key_prefix(key_id))
        .next_back()
        .transpose()
        .map_err(|e| backend("read usage index", e))?;
    Ok(last.and_then(|(index_key, value)| {
        let chunks = usage_log::chunks_in(&value);
        (usage_log::is_run(&value) && chunks < usage_log::RUN_CHUNKS).then(|| OpenRun {
            index_key: index_key.to_vec(),
            chunks,
        })
    }))
}

/// A key's ledger, oldest first: its task entries and its charges from the usage log, in the
/// order of their sequence numbers (one counter serves both).
pub(super) fn entries(store: &SledStore, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
    let prefix = key_prefix(key_id);
    let seq_of = |stored: &[u8]| {
        let tail = stored.get(prefix.len()..).unwrap_or_default();
        <[u8; 8]>::try_from(tail).map_or(0, u64::from_be_bytes)
    };
    let mut runs: Vec<(u64, Vec<LedgerEntry>)> = Vec::new();
    for item in store.trees.ledger.scan_prefix(&prefix) {
        let (id, bytes) = item.map_err(|e| backend("read ledger", e))?;
        runs.push((seq_of(&id), vec![decode(LEDGER, &bytes)?]));
    }
    for item in store.usage_by_key.scan_prefix(&prefix) {
        let (id, stored) = item.map_err(|e| backend("read usage index", e))?;
        for (seq, place) in usage_log::chunks(&stored, seq_of(&id)) {
            let bytes = match place {
                Some((at, len)) => store.usage_log.read(at, len)?,
                None => match store
                    .usage
                    .get(seq.to_be_bytes())
                    .map_err(|e| backend("read usage", e))?
                {
                    Some(bytes) => bytes.to_vec(),
                    None => continue,
                },
            };
            let chunk = usage_chunk::decode(&bytes)?;
            runs.push((
                seq,
                chunk.into_iter().filter(|e| e.key_id == key_id).collect(),
            ));
        }
    }
    runs.sort_by_key(|(seq, _)| *seq);
    Ok(runs.into_iter().flat_map(|(_, run)| run).collect())
}

/// The `ledger_by_task` key of a task's entry of one kind.
fn by_task_key(task_id: &str, kind: LedgerKind) -> Vec<u8> {
    [task_id.as_bytes(), &[0], kind.as_str().as_bytes()].concat()
}

/// The time of a ledger entry, in seconds since the epoch.
pub(super) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
