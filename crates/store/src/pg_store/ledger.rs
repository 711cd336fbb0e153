//! The ledger steps on PostgreSQL: a task step's drafts (pre-deduction, settlement, refund)
//! taken from or given back to their key's quota under the key's row lock, one `ledger` row
//! each, unique per `(task_id, kind)`; the charges of work without a task in `usage`; a key's
//! ledger, both merged by one sequence.

use std::collections::{BTreeMap, HashSet};

use deadpool_postgres::Transaction;
use tokio_postgres::types::Json;

use super::names::ledger_kind;
use super::pool::PgStore;
use super::txn::{self, Fault, Sql, check_id, corrupt, decode, unbig, unix_secs};
use crate::{Charge, Key, LedgerDraft, LedgerEntry, LedgerKind, StoreError};

const KEYS: &str = "keys";
const LEDGER: &str = "ledger";
/// The constraint that keeps a task's entry of one kind unique.
const TASK_KIND_UNIQUE: &str = "ledger_task_kind_unique";
/// What a ledger entry's id starts with (a ULID follows).
pub(super) const LEDGER_ID_PREFIX: &str = "led_";

/// Applies ledger drafts inside a transaction, in order: checks `(task_id, kind)` uniqueness,
/// moves the key's quota (its row locked), writes the entries. Two statements a draft: one
/// checks and locks, one writes the key and the entry.
pub(super) async fn apply(
    tx: &Transaction<'_>,
    drafts: &[LedgerDraft],
    at: u64,
) -> Result<(), Fault> {
    for draft in drafts {
        let what = format!("ledger {} of task {}", draft.kind.as_str(), draft.task_id);
        let duplicate = || StoreError::DuplicateLedger {
            task_id: draft.task_id.clone(),
            kind: draft.kind,
        };
        // Whether the entry is there, then the key, locked (the entry is looked for first: a
        // duplicate is the answer even when the key is gone).
        let row = txn::query_one(
            tx,
            &what,
            "SELECT EXISTS (SELECT 1 FROM ledger WHERE task_id = $2 AND kind = $3), \
                    (SELECT record::text FROM keys WHERE id = $1 FOR UPDATE)",
            &[&draft.key_id, &draft.task_id, &draft.kind.as_str()],
        )
        .await?;
        let seen: bool = row.try_get(0).sql(&what)?;
        if seen {
            return Err(duplicate().into());
        }
        let key: Option<String> = row.try_get(1).sql(&what)?;
        let Some(key) = key else {
            return Err(StoreError::KeyNotFound(draft.key_id.clone()).into());
        };
        let mut key: Key = decode(KEYS, &key)?;
        let balance_after = take(&mut key, draft)?;
        // The key written back (its hash unchanged) and the entry, in one statement.
        let inserted = txn::execute(
            tx,
            &what,
            "WITH key AS (UPDATE keys SET record = $8 WHERE id = $2) \
             INSERT INTO ledger (seq, id, key_id, task_id, kind, amount, balance_after, at) \
             VALUES (nextval('ledger_seq'), $1, $2, $3, $4, $5, $6, $7)",
            &[
                &format!("{LEDGER_ID_PREFIX}{}", ulid::Ulid::new()),
                &draft.key_id,
                &draft.task_id,
                &draft.kind.as_str(),
                &draft.amount,
                &balance_after,
                &txn::big(at),
                &Json(&key),
            ],
        )
        .await;
        match inserted {
            Ok(_) => {}
            // A concurrent step wrote the same entry after the check above.
            Err(fault) if fault.unique_violation() == Some(TASK_KIND_UNIQUE) => {
                return Err(duplicate().into());
            }
            Err(fault) => return Err(fault),
        }
    }
    Ok(())
}

/// `draft` taken from or given back to `key`'s quota: the balance after it (`None` for a key
/// without a quota), or why it cannot be (the quota would go below zero, or overflow).
pub(super) fn take(key: &mut Key, draft: &LedgerDraft) -> Result<Option<i64>, StoreError> {
    let overflow = || {
        StoreError::Backend(format!(
            "ledger {} on key {}: amount {} overflows the quota",
            draft.kind.as_str(),
            draft.key_id,
            draft.amount
        ))
    };
    let balance_after = match key.quota {
        Some(remaining) => {
            let after = remaining.checked_add(draft.amount).ok_or_else(overflow)?;
            if draft.amount < 0 && after < 0 {
                return Err(StoreError::InsufficientQuota {
                    key_id: draft.key_id.clone(),
                    needed: draft.amount.saturating_neg(),
                    remaining,
                });
            }
            Some(after)
        }
        None => None,
    };
    key.quota_used = key
        .quota_used
        .checked_sub(draft.amount)
        .ok_or_else(overflow)?;
    key.quota = balance_after;
    Ok(balance_after)
}

/// The key `id`, its row locked until the transaction ends.
pub(super) async fn lock_key(
    tx: &Transaction<'_>,
    id: &str,
    what: &str,
) -> Result<Option<Key>, Fault> {
    let sql = "SELECT record::text FROM keys WHERE id = $1 FOR UPDATE";
    match txn::query_opt(tx, what, sql, &[&id]).await? {
        Some(row) => {
            let text: String = row.try_get(0).sql(what)?;
            Ok(Some(decode(KEYS, &text)?))
        }
        None => Ok(None),
    }
}

/// [`crate::Store::charges`]: each charge takes what its key has left at the most, in one
/// transaction; the keys are locked in the order of their ids (so two batches never wait on
/// each other in a circle) and written once each; the entries go to `usage` under one
/// sequence number, in the same statement as the keys. Charge ids are the caller's, minted once each: they are checked within
/// the batch, with no index to keep per charge.
pub(super) async fn charges(store: &PgStore, charges: &[Charge]) -> Result<Vec<i64>, StoreError> {
    if charges.is_empty() {
        return Ok(Vec::new());
    }
    let at = unix_secs();
    super::txn::retry("charges", || async move {
        let mut client = store.client("charges").await?;
        let tx = client.transaction().await.sql("charges: begin")?;
        let mut ids: Vec<&str> = charges.iter().map(|c| c.key_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let params: txn::Params = &[&ids];
        let (_, rows) = tokio::try_join!(
            store.commits.let_go(&tx, "charges: begin"),
            txn::query(
                &tx,
                "charges: lock keys",
                "SELECT id, record::text FROM keys WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                params,
            )
        )?;
        let mut keys: BTreeMap<String, (Key, bool)> = BTreeMap::new();
        for row in &rows {
            let id: String = row.try_get(0).sql("charges: read key")?;
            let text: String = row.try_get(1).sql("charges: read key")?;
            keys.insert(id, (decode(KEYS, &text)?, false));
        }
        let mut taken = Vec::with_capacity(charges.len());
        let mut seen: HashSet<&str> = HashSet::with_capacity(charges.len());
        let mut entries: Vec<LedgerEntry> = Vec::with_capacity(charges.len());
        for charge in charges {
            if check_id("charge id", &charge.task_id).is_err()
                || !seen.insert(charge.task_id.as_str())
            {
                taken.push(0);
                continue;
            }
            let Some((key, changed)) = keys.get_mut(&charge.key_id) else {
                taken.push(0);
                continue;
            };
            let take = match key.quota {
                Some(remaining) => charge.amount.clamp(0, remaining.max(0)),
                None => charge.amount.max(0),
            };
            key.quota = key.quota.map(|q| q - take);
            key.quota_used = key.quota_used.saturating_add(take);
            *changed = true;
            entries.push(LedgerEntry {
                id: format!("{LEDGER_ID_PREFIX}{}", ulid::Ulid::new()),
                key_id: charge.key_id.clone(),
                task_id: charge.task_id.clone(),
                kind: LedgerKind::Charge,
                amount: -take,
                balance_after: key.quota,
                at,
            });
            taken.push(take);
        }
        if !entries.is_empty() {
            let ord: Vec<i32> = (0..entries.len())
                .map(|i| i32::try_from(i).unwrap_or(i32::MAX))
                .collect();
            let id: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
            let key_id: Vec<&str> = entries.iter().map(|e| e.key_id.as_str()).collect();
            let task_id: Vec<&str> = entries.iter().map(|e| e.task_id.as_str()).collect();
            let amount: Vec<i64> = entries.iter().map(|e| e.amount).collect();
            let balance: Vec<Option<i64>> = entries.iter().map(|e| e.balance_after).collect();
            // A key is changed when it took a charge: when there are entries.
            let (key_ids, records): (Vec<&str>, Vec<Json<&Key>>) = keys
                .iter()
                .filter(|(_, (_, changed))| *changed)
                .map(|(id, (key, _))| (id.as_str(), Json(key)))
                .unzip();
            txn::execute(
                &tx,
                "charges: write usage and keys",
                "WITH batch AS MATERIALIZED (SELECT nextval('ledger_seq') AS seq), \
                      written AS ( \
                        UPDATE keys SET record = k.record \
                        FROM unnest($8::text[], $9::jsonb[]) AS k(id, record) \
                        WHERE keys.id = k.id \
                      ) \
                 INSERT INTO usage (seq, ord, id, key_id, task_id, amount, balance_after, at) \
                 SELECT batch.seq, u.ord, u.id, u.key_id, u.task_id, u.amount, u.balance_after, $7 \
                 FROM batch, unnest($1::int[], $2::text[], $3::text[], $4::text[], \
                        $5::bigint[], $6::bigint[]) AS u(ord, id, key_id, task_id, amount, \
                        balance_after)",
                &[
                    &ord,
                    &id,
                    &key_id,
                    &task_id,
                    &amount,
                    &balance,
                    &txn::big(at),
                    &key_ids,
                    &records,
                ],
            )
            .await?;
        }
        tx.commit().await.sql("charges: commit")?;
        store.commits.flushed(&client, "charges: flush").await?;
        Ok(taken)
    })
    .await
}

/// A key's ledger, oldest first: its task entries and its charges, by their sequence numbers.
pub(super) async fn entries(store: &PgStore, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
    let what = format!("read ledger of key {key_id}");
    let client = store.client(&what).await?;
    let rows = txn::query(
        &client,
        &what,
        "SELECT id, key_id, task_id, kind, amount, balance_after, at FROM ( \
                SELECT seq, 0 AS ord, id, key_id, task_id, kind, amount, balance_after, at \
                FROM ledger WHERE key_id = $1 \
                UNION ALL \
                SELECT seq, ord, id, key_id, task_id, 'charge', amount, balance_after, at \
                FROM usage WHERE key_id = $1 \
         ) e ORDER BY seq, ord",
        &[&key_id],
    )
    .await
    .map_err(Fault::into_store)?;
    let read = |row: &tokio_postgres::Row| -> Result<LedgerEntry, Fault> {
        let kind: String = row.try_get(3).sql(&what)?;
        let kind = ledger_kind(&kind).ok_or_else(|| corrupt(LEDGER, "unknown ledger kind"))?;
        Ok(LedgerEntry {
            id: row.try_get(0).sql(&what)?,
            key_id: row.try_get(1).sql(&what)?,
            task_id: row.try_get(2).sql(&what)?,
            kind,
            amount: row.try_get(4).sql(&what)?,
            balance_after: row.try_get(5).sql(&what)?,
            at: unbig(row.try_get(6).sql(&what)?),
        })
    };
    rows.iter()
        .map(read)
        .collect::<Result<_, _>>()
        .map_err(Fault::into_store)
}
