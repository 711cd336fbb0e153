//! Webhooks on sled: the record by id (`webhooks`), the due index (`webhooks_due`: the next
//! attempt's time, then the id, for pending webhooks only; its value is the owner, `\0`, and
//! the URL, so a claim chooses by receiver without reading records) and the index by task
//! (`webhooks_by_task`: task id `\0` webhook id). A task's end writes its webhook inside the
//! transaction of the move ([`insert`]); claims and attempts are steps of their own.

use std::borrow::Cow;

use sled::transaction::TransactionalTree;

use super::index::{pair_key, split_time_key, time_key};
use super::record::{backend, check_id, corrupt, read};
use super::trees::{SledStore, Tx, WEBHOOKS, WEBHOOKS_DUE};
use super::txn::{TxResult, abort, get, put};
use crate::model::unix_ms;
use crate::{
    DueWebhook, Page, StoreError, Webhook, WebhookAttempt, WebhookOutcome, WebhookPick,
    WebhookPicker, WebhookQuery,
};

/// Largest page `webhooks` returns.
const MAX_PAGE: usize = 1000;

fn due_key(webhook: &Webhook) -> Option<Vec<u8>> {
    webhook
        .next_attempt_ms
        .map(|ms| time_key(ms, webhook.id.as_bytes()))
}

/// A due entry's value: the owner, `\0`, the URL.
fn due_value(webhook: &Webhook) -> Vec<u8> {
    [webhook.owner.as_bytes(), &[0], webhook.url.as_bytes()].concat()
}

/// Keeps the due index in step with a webhook that went from `old` to `new`.
fn move_due(tree: &TransactionalTree, old: &Webhook, new: &Webhook) -> TxResult<()> {
    let (from, to) = (due_key(old), due_key(new));
    if from != to {
        if let Some(k) = from {
            tree.remove(k)?;
        }
        if let Some(k) = to {
            tree.insert(k, due_value(new))?;
        }
    }
    Ok(())
}

/// Writes a new webhook and its index entries (inside the transaction that ended its task).
pub(super) fn insert(tx: &Tx<'_>, webhook: &Webhook) -> TxResult<()> {
    put(tx.webhooks, webhook.id.as_bytes(), "webhook", webhook)?;
    tx.webhooks_by_task
        .insert(pair_key(&webhook.task_id, &webhook.id), &[][..])?;
    if let Some(k) = due_key(webhook) {
        tx.webhooks_due.insert(k, due_value(webhook))?;
    }
    Ok(())
}

/// A due entry's owner and URL.
type Receiver<'v> = (Cow<'v, str>, Cow<'v, str>);

/// A due entry's owner and URL, borrowed from its value; an entry written without them (by
/// an earlier version) has them read from its record. `None`: the record is gone.
fn receiver<'v>(
    store: &SledStore,
    id: &[u8],
    value: &'v [u8],
) -> Result<Option<Receiver<'v>>, StoreError> {
    let text = |bytes: &'v [u8]| {
        std::str::from_utf8(bytes)
            .map(Cow::Borrowed)
            .map_err(|_| corrupt(WEBHOOKS_DUE, "webhook due entry is not UTF-8"))
    };
    if let Some(at) = value.iter().position(|&b| b == 0) {
        return Ok(Some((text(&value[..at])?, text(&value[at + 1..])?)));
    }
    let record = read::<Webhook>(&store.trees.webhooks, WEBHOOKS, id, "read due webhook")?;
    Ok(record.map(|w| (Cow::Owned(w.owner), Cow::Owned(w.url))))
}

/// [`crate::Store::pick_webhooks`]: the due index read up to `scan` entries, `pick` asked about
/// each, then the chosen ones moved in one transaction (one delivered or moved since the index
/// read is left alone).
pub(super) fn pick(
    store: &SledStore,
    now_ms: u64,
    lease_ms: u64,
    scan: usize,
    pick: WebhookPicker<'_>,
) -> Result<Vec<Webhook>, StoreError> {
    let mut chosen: Vec<(Vec<u8>, u64, bool)> = Vec::new();
    let until = now_ms.saturating_add(lease_ms);
    for entry in store.trees.webhooks_due.iter().take(scan) {
        let (key, value) = entry.map_err(|e| backend("read webhook due index", e))?;
        let (ms, id) = split_time_key(&key, WEBHOOKS_DUE, "webhook due key shorter than 9 bytes")?;
        if ms > now_ms {
            break;
        }
        let Some((owner, url)) = receiver(store, id, &value)? else {
            continue;
        };
        let id_text = std::str::from_utf8(id)
            .map_err(|_| corrupt(WEBHOOKS_DUE, "webhook id is not UTF-8"))?;
        let due = DueWebhook {
            id: id_text,
            owner: &owner,
            url: &url,
        };
        match pick(&due) {
            WebhookPick::Take => chosen.push((id.to_vec(), until, true)),
            WebhookPick::Defer { at_ms } => chosen.push((id.to_vec(), at_ms, false)),
            WebhookPick::Skip => {}
            WebhookPick::Stop => break,
        }
    }
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    store.trees.tx("claim due webhooks", |tx| {
        let mut taken = Vec::new();
        for (id, at_ms, take) in &chosen {
            let Some(old): Option<Webhook> = get(tx.webhooks, WEBHOOKS, id)? else {
                continue;
            };
            if old.next_attempt_ms.is_none_or(|at| at > now_ms) {
                continue;
            }
            let mut new = old.clone();
            new.next_attempt_ms = Some(*at_ms);
            move_due(tx.webhooks_due, &old, &new)?;
            put(tx.webhooks, id, "webhook", &new)?;
            if *take {
                taken.push(new);
            }
        }
        Ok(taken)
    })
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
        move_due(tx.webhooks_due, &old, &new)?;
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
