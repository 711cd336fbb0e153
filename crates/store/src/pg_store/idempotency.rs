//! Idempotency records on PostgreSQL: the `idempotency` table (the record as JSON text; the
//! claim time as a column for the sweep's index). A claim first tries to insert a pending
//! record (the common case, one statement); when one is there it locks and reads it and
//! applies the rules of [`decide`]. A task's creation completes the record in its own
//! transaction ([`complete`]).

use deadpool_postgres::Transaction;

use super::pool::PgStore;
use super::txn::{self, Fault, Sql, big, check_id, decode, retry};
use crate::idempotency::{Decision, decide, held_by};
use crate::{IdemAnswer, IdemClaim, IdemRecord, IdemTicket, StoreError};

const IDEMPOTENCY: &str = "idempotency";

fn text_of(record: &IdemRecord) -> Result<String, StoreError> {
    serde_json::to_string(record)
        .map_err(|e| StoreError::Backend(format!("encode idempotency record: {e}")))
}

fn check(ticket: &IdemTicket) -> Result<(), StoreError> {
    check_id("idempotency key owner", &ticket.key_id)?;
    check_id("idempotency key", &ticket.key)
}

/// The record of `ticket`'s key, locked for the rest of the transaction.
async fn locked(tx: &Transaction<'_>, ticket: &IdemTicket) -> Result<Option<IdemRecord>, Fault> {
    let what = "read an idempotency record";
    let sql = "SELECT record FROM idempotency WHERE key_id = $1 AND idem_key = $2 FOR UPDATE";
    let Some(row) = txn::query_opt(tx, what, sql, &[&ticket.key_id, &ticket.key]).await? else {
        return Ok(None);
    };
    let text: String = row.try_get(0).sql(what)?;
    Ok(Some(decode(IDEMPOTENCY, &text)?))
}

async fn write(tx: &Transaction<'_>, record: &IdemRecord) -> Result<(), Fault> {
    txn::execute(
        tx,
        "write an idempotency record",
        "UPDATE idempotency SET created_ms = $3, record = $4 WHERE key_id = $1 AND idem_key = $2",
        &[
            &record.key_id,
            &record.key,
            &big(record.created_ms),
            &text_of(record)?,
        ],
    )
    .await?;
    Ok(())
}

/// [`crate::Store::claim_idempotency`].
pub(super) async fn claim(
    store: &PgStore,
    ticket: &IdemTicket,
    fingerprint: &str,
    now_ms: u64,
) -> Result<IdemClaim, StoreError> {
    check(ticket)?;
    let what = "claim an idempotency key";
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        let Decision::Write(fresh) = decide(None, ticket, fingerprint, now_ms) else {
            return Err(StoreError::Backend(format!("{what}: no record to write")).into());
        };
        let inserted = txn::execute(
            &tx,
            what,
            "INSERT INTO idempotency (key_id, idem_key, created_ms, record) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            &[
                &ticket.key_id,
                &ticket.key,
                &big(fresh.created_ms),
                &text_of(&fresh)?,
            ],
        )
        .await?;
        let found = if inserted == 1 {
            IdemClaim::Claimed
        } else {
            match locked(&tx, ticket).await? {
                // Released between the two statements: taken as still in flight.
                None => IdemClaim::InFlight,
                Some(old) => match decide(Some(&old), ticket, fingerprint, now_ms) {
                    Decision::Answer(found) => found,
                    Decision::Write(new) => {
                        write(&tx, &new).await?;
                        IdemClaim::Claimed
                    }
                },
            }
        };
        tx.commit().await.sql(what)?;
        Ok(found)
    })
    .await
}

/// Completes `ticket`'s record with `answer` inside a transaction (a task's creation); a
/// record no longer held by the ticket fails the step.
pub(super) async fn complete(
    tx: &Transaction<'_>,
    ticket: &IdemTicket,
    answer: &IdemAnswer,
) -> Result<(), Fault> {
    match locked(tx, ticket).await? {
        Some(mut record) if held_by(Some(&record), ticket) => {
            record.answer = Some(answer.clone());
            write(tx, &record).await
        }
        _ => Err(StoreError::IdempotencyLost(ticket.key.clone()).into()),
    }
}

/// [`crate::Store::finish_idempotency`].
pub(super) async fn finish(
    store: &PgStore,
    ticket: &IdemTicket,
    answer: Option<&IdemAnswer>,
) -> Result<(), StoreError> {
    check(ticket)?;
    let what = "finish an idempotency claim";
    retry(what, || async move {
        let mut client = store.client(what).await?;
        let tx = client.transaction().await.sql(what)?;
        match answer {
            Some(answer) => complete(&tx, ticket, answer).await?,
            None => {
                if !held_by(locked(&tx, ticket).await?.as_ref(), ticket) {
                    return Err(StoreError::IdempotencyLost(ticket.key.clone()).into());
                }
                txn::execute(
                    &tx,
                    what,
                    "DELETE FROM idempotency WHERE key_id = $1 AND idem_key = $2",
                    &[&ticket.key_id, &ticket.key],
                )
                .await?;
            }
        }
        tx.commit().await.sql(what)
    })
    .await
}

/// [`crate::Store::sweep_idempotency`]: one statement, oldest first from the time index.
pub(super) async fn sweep(
    store: &PgStore,
    before_ms: u64,
    limit: usize,
) -> Result<usize, StoreError> {
    let what = "sweep idempotency records";
    let client = store.client(what).await?;
    let limit = big(limit as u64);
    let removed = txn::execute(
        &client,
        what,
        "DELETE FROM idempotency WHERE (key_id, idem_key) IN (SELECT key_id, idem_key \
         FROM idempotency WHERE created_ms < $1 ORDER BY created_ms LIMIT $2)",
        &[&big(before_ms), &limit],
    )
    .await
    .map_err(Fault::into_store)?;
    Ok(usize::try_from(removed).unwrap_or(usize::MAX))
}
