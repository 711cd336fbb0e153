//! Webhooks on sled: the record by id (`webhooks`), the due index (`webhooks_due`: the next
//! attempt's time, then the id, for pending webhooks only) and the index by task
//! (`webhooks_by_task`: task id `\0` webhook id). A task's end writes its webhook inside the
//! transaction of the move ([`insert`]); claims and attempts are steps of their own.

use super::index::{move_entry, pair_key, split_time_key, time_key};
use super::record::{backend, check_id, read};
use super::trees::{SledStore, Tx, WEBHOOKS, WEBHOOKS_DUE};
use super::txn::{TxResult, abort, get, put};
use crate::model::unix_ms;
use crate::{Page, StoreError, Webhook, WebhookAttempt, WebhookOutcome, WebhookQuery};

/// Largest page `webhooks` returns.
const MAX_PAGE: usize = 1000;

fn due_key(webhook: &Webhook) -> Option<Vec<u8>> {
    webhook
        .next_attempt_ms
        .map(|ms| time_key(ms, webhook.id.as_bytes()))
}

/// Writes a new webhook and its index entries (inside the transaction that ended its task).
pub(super) fn insert(tx: &Tx<'_>, webhook: &Webhook) -> TxResult<()> {
    put(tx.webhooks, webhook.id.as_bytes(), "webhook", webhook)?;
    tx.webhooks_by_task
        .insert(pair_key(&webhook.task_id, &webhook.id), &[][..])?;
    if let Some(k) = due_key(webhook) {
        tx.webhooks_due.insert(k, &[][..])?;
    }
    Ok(())
}

/// [`crate::Store::claim_webhooks`]: the due entries up to `limit`, each lease written in a
/// transaction of its own (one delivered or moved since the index read is skipped).
pub(super) fn claim(
    store: &SledStore,
    now_ms: u64,
    lease_ms: u64,
    limit: usize,
) -> Result<Vec<Webhook>, StoreError> {
    let mut ids = Vec::new();
    for key in store.trees.webhooks_due.iter().keys().take(limit) {
        let key = key.map_err(|e| backend("read webhook due index", e))?;
        let (ms, id) = split_time_key(&key, WEBHOOKS_DUE, "webhook due key shorter than 9 bytes")?;
        if ms > now_ms {
            break;
        }
        ids.push(id.to_vec());
    }
    let until = now_ms.saturating_add(lease_ms);
    let mut claimed = Vec::with_capacity(ids.len());
    for id in ids {
        let webhook = store.trees.tx("claim a due webhook", |tx| {
            let Some(old): Option<Webhook> = get(tx.webhooks, WEBHOOKS, &id)? else {
                return Ok(None);
            };
            if old.next_attempt_ms.is_none_or(|at| at > now_ms) {
                return Ok(None);
            }
            let mut new = old.clone();
            new.next_attempt_ms = Some(until);
            move_entry(tx.webhooks_due, due_key(&old), due_key(&new))?;
            put(tx.webhooks, &id, "webhook", &new)?;
            Ok(Some(new))
        })?;
        claimed.extend(webhook);
    }
    Ok(claimed)
}

/// [`crate::Store::record_webhook_attempt`] (the caller flushes).
pub(super) fn record(
    store: &SledStore,
    id: &str,
    attempt: &WebhookAttempt,
    outcome: WebhookOutcome,
) -> Result<Webhook, StoreError> {
    store.trees.tx(&format!("record webhook {id}"), |tx| {
        let Some(old): Option<Webhook> = get(tx.webhooks, WEBHOOKS, id.as_bytes())? else {
            return abort(StoreError::WebhookNotFound(id.to_owned()));
        };
        let mut new = old.clone();
        new.record(attempt, outcome);
        move_entry(tx.webhooks_due, due_key(&old), due_key(&new))?;
        put(tx.webhooks, id.as_bytes(), "webhook", &new)?;
        Ok(new)
    })
}

/// [`crate::Store::webhooks`]: one task's from its index, else all, newest first.
pub(super) fn list(store: &SledStore, query: &WebhookQuery) -> Result<Page<Webhook>, StoreError> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let ids: Box<dyn Iterator<Item = Result<Vec<u8>, StoreError>>> = match &query.task_id {
        Some(task_id) => {
            check_id("task id", task_id)?;
            let prefix = pair_key(task_id, "");
            let skip = prefix.len();
            Box::new(
                store
                    .trees
                    .webhooks_by_task
                    .scan_prefix(prefix)
                    .rev()
                    .map(move |k| {
                        k.map(|(k, _)| k[skip..].to_vec())
                            .map_err(|e| backend("read webhooks of a task", e))
                    }),
            )
        }
        None => Box::new(store.trees.webhooks.iter().rev().map(|k| {
            k.map(|(k, _)| k.to_vec())
                .map_err(|e| backend("list webhooks", e))
        })),
    };
    let after = query.after.as_deref().map(str::as_bytes);
    let mut items = Vec::new();
    let mut has_more = false;
    for id in ids {
        let id = id?;
        if after.is_some_and(|a| id.as_slice() >= a) {
            continue;
        }
        let Some(webhook) = read::<Webhook>(&store.trees.webhooks, WEBHOOKS, &id, "read webhook")?
        else {
            continue;
        };
        if !webhook.matches(query) {
            continue;
        }
        if items.len() == limit {
            has_more = true;
            break;
        }
        items.push(webhook);
    }
    Ok(Page { items, has_more })
}

/// The time of a new webhook (kept here so the task step needs no clock of its own).
pub(super) fn now_ms() -> u64 {
    unix_ms()
}
