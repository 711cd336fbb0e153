//! Webhooks on PostgreSQL: the `webhooks` table (the record as JSON text, so the task in it
//! keeps its params as written; `status`, `task_id` and `due_ms`, the next attempt, as columns
//! for the indexes; `owner` and `url` for a claim's choice). A task's end writes its webhook
//! inside the transaction of the move ([`insert`]); a claim is one transaction that locks the
//! earliest due rows with `FOR UPDATE SKIP LOCKED`, as task claims do, reading their receivers
//! only, and moves those chosen; an attempt locks its row.

use deadpool_postgres::Transaction;
use tokio_postgres::Row;

use super::pool::PgStore;
use super::txn::{self, Fault, Filter, Sql, big, check_id, decode, unbig};
use crate::model::unix_ms;
use crate::{
    DueWebhook, Page, StoreError, Webhook, WebhookAttempt, WebhookOutcome, WebhookPick,
    WebhookPicker, WebhookQuery,
};

const WEBHOOKS: &str = "webhooks";
/// Largest page `webhooks` returns.
const MAX_PAGE: usize = 1000;

fn due_ms(webhook: &Webhook) -> Option<i64> {
    webhook.next_attempt_ms.map(|ms| big(ms).min(i64::MAX - 1))
}

/// A webhook from a row read as `record, due_ms`: its next attempt is the column's.
fn read(row: &Row) -> Result<Webhook, Fault> {
    let text: String = row.try_get(0).sql("read webhook")?;
    let due: Option<i64> = row.try_get(1).sql("read webhook")?;
    let mut webhook: Webhook = decode(WEBHOOKS, &text)?;
    webhook.next_attempt_ms = due.map(unbig);
    Ok(webhook)
}

fn text_of(webhook: &Webhook) -> Result<String, StoreError> {
    serde_json::to_string(webhook).map_err(|e| StoreError::Backend(format!("encode webhook: {e}")))
}

/// The time of a new webhook.
pub(super) fn now_ms() -> u64 {
    unix_ms()
}

/// Writes a new webhook (inside the transaction that ended its task).
pub(super) async fn insert(tx: &Transaction<'_>, webhook: &Webhook) -> Result<(), Fault> {
    let what = format!("create webhook of task {}", webhook.task_id);
    let record = text_of(webhook)?;
    txn::execute(
        tx,
        &what,
        "INSERT INTO webhooks (id, task_id, status, due_ms, record, owner, url) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &webhook.id,
            &webhook.task_id,
            &webhook.status.as_str(),
            &due_ms(webhook),
            &record,
            &webhook.owner,
            &webhook.url,
        ],
    )
    .await?;
    Ok(())
}

/// [`crate::Store::pick_webhooks`]: one transaction (never run again, `pick` having counted
/// what it chose): the earliest due rows locked, skipping those another claim holds, `pick`
/// asked about each, the taken ones leased and the deferred ones moved.
pub(super) async fn pick(
    store: &PgStore,
    now_ms: u64,
    lease_ms: u64,
    scan: usize,
    pick: WebhookPicker<'_>,
) -> Result<Vec<Webhook>, StoreError> {
    let now = big(now_ms).min(i64::MAX - 1);
    let until = big(now_ms.saturating_add(lease_ms)).min(i64::MAX - 1);
    let n = big(scan as u64);
    let what = "claim due webhooks";
    let mut client = store.client(what).await?;
    let run = async {
        let tx = client.transaction().await.sql(what)?;
        let rows = txn::query(
            &tx,
            what,
            "SELECT id, owner, url FROM webhooks WHERE due_ms <= $1 \
             ORDER BY due_ms, id LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now, &n],
        )
        .await?;
        let mut taken: Vec<String> = Vec::new();
        let (mut deferred, mut deferred_to): (Vec<String>, Vec<i64>) = (Vec::new(), Vec::new());
        for row in &rows {
            let id: &str = row.try_get(0).sql(what)?;
            let owner: &str = row.try_get(1).sql(what)?;
            let url: &str = row.try_get(2).sql(what)?;
            match pick(&DueWebhook { id, owner, url }) {
                WebhookPick::Take => taken.push(id.to_owned()),
                WebhookPick::Defer { at_ms } => {
                    deferred.push(id.to_owned());
                    deferred_to.push(big(at_ms).min(i64::MAX - 1));
                }
                WebhookPick::Skip => {}
                WebhookPick::Stop => break,
            }
        }
        if !deferred.is_empty() {
            txn::execute(
                &tx,
                what,
                "UPDATE webhooks SET due_ms = d.at FROM unnest($1::text[], $2::bigint[]) AS d(id, at) \
                 WHERE webhooks.id = d.id",
                &[&deferred, &deferred_to],
            )
            .await?;
        }
        let rows = if taken.is_empty() {
            Vec::new()
        } else {
            txn::query(
                &tx,
                what,
                "UPDATE webhooks SET due_ms = $2 WHERE id = ANY($1::text[]) RETURNING record, due_ms",
                &[&taken, &until],
            )
            .await?
        };
        tx.commit().await.sql(what)?;
        let claimed = rows
            .iter()
            .map(read)
            .collect::<Result<Vec<Webhook>, Fault>>()?;
        Ok::<_, Fault>((taken, claimed))
    };
    let (taken, mut claimed) = run.await.map_err(Fault::into_store)?;
    // Earliest due first, as they were read.
    let order: std::collections::HashMap<&str, usize> = taken
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    claimed.sort_by_key(|w| order.get(w.id.as_str()).copied().unwrap_or(usize::MAX));
    Ok(claimed)
}

/// [`crate::Store::record_webhook_attempt`] in a transaction.
pub(super) async fn record(
    tx: &Transaction<'_>,
    id: &str,
    attempt: &WebhookAttempt,
    outcome: WebhookOutcome,
) -> Result<Webhook, Fault> {
    let what = format!("record webhook {id}");
    let sql = "SELECT record, due_ms FROM webhooks WHERE id = $1 FOR UPDATE";
    let Some(row) = txn::query_opt(tx, &what, sql, &[&id]).await? else {
        return Err(StoreError::WebhookNotFound(id.to_owned()).into());
    };
    let mut webhook = read(&row)?;
    webhook.record(attempt, outcome);
    let record = text_of(&webhook)?;
    txn::execute(
        tx,
        &what,
        "UPDATE webhooks SET status = $2, due_ms = $3, record = $4 WHERE id = $1",
        &[&id, &webhook.status.as_str(), &due_ms(&webhook), &record],
    )
    .await?;
    Ok(webhook)
}

/// [`crate::Store::webhooks`]: newest first (ids sort by creation time), filtered.
pub(super) async fn list(
    store: &PgStore,
    query: &WebhookQuery,
) -> Result<Page<Webhook>, StoreError> {
    if let Some(task_id) = &query.task_id {
        check_id("task id", task_id)?;
    }
    let limit = query.limit.clamp(1, MAX_PAGE);
    let status = query.status.map(|s| s.as_str());
    let n = big(limit as u64 + 1);
    let mut filter = Filter::default();
    filter.and_some("task_id = ?", &query.task_id);
    filter.and_some("status = ?", &status);
    filter.and_some("id < ?", &query.after);
    let limit_param = filter.param(&n);
    let (clause, params) = filter.finish();
    let sql =
        format!("SELECT record, due_ms FROM webhooks{clause} ORDER BY id DESC LIMIT {limit_param}");
    let client = store.client("list webhooks").await?;
    let rows = txn::query(&client, "list webhooks", &sql, &params)
        .await
        .map_err(Fault::into_store)?;
    let has_more = rows.len() > limit;
    let items = rows[..rows.len().min(limit)]
        .iter()
        .map(read)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Fault::into_store)?;
    Ok(Page { items, has_more })
}
