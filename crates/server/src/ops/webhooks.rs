//! Webhooks of finished tasks: the event a task's end announces (rendered as its format's
//! `GET` answers the task), the delivery worker (claims due deliveries from the store's outbox
//! with a lease, signs and posts them, records each attempt, retries with exponential backoff
//! for a bounded time) and the operators' listing, `GET /admin/webhooks`.
//!
//! The store writes a task's webhook in the transaction that ends the task, so a delivery is
//! never lost to a crash; a lease that runs out (its holder died mid-delivery) hands the
//! delivery to the next claim, which may deliver it again: at least once, the same
//! `webhook-id` each time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::now_ms;
use error_codes::{ApiError, ErrorCode};
use fetch::FetchError;
use futures_util::future::join_all;
use http::{HeaderName, HeaderValue};
use serde_json::{Value, json};
use store::{
    Task, TaskKind, TaskStatus, Webhook, WebhookAttempt, WebhookOutcome, WebhookQuery,
    WebhookStatus,
};
use tokio::sync::watch;

use crate::app::App;
use crate::config::WebhooksConfig;
use crate::formats::generations::Generations;
use crate::formats::tasks::TaskFormat;
use crate::formats::videos::Videos;
use crate::ground::http::{Answer, error, ok, query_param, store_unavailable};

/// Time past an attempt's timeout that its lease still runs (recording the attempt).
const LEASE_SLACK_MS: u64 = 2_000;

/// The event type of a task's end, in its format's own status words.
pub fn event_type(task: &Task) -> &'static str {
    match (task.kind, task.status) {
        (TaskKind::Video, TaskStatus::Succeeded) => "video.completed",
        (TaskKind::Video, TaskStatus::Failed) => "video.failed",
        (TaskKind::Video, TaskStatus::Cancelled) => "video.cancelled",
        (TaskKind::Video, _) => "video.updated",
        (TaskKind::Generation, TaskStatus::Succeeded) => "video_generation.succeeded",
        (TaskKind::Generation, TaskStatus::Failed) => "video_generation.failed",
        (TaskKind::Generation, TaskStatus::Cancelled) => "video_generation.cancelled",
        (TaskKind::Generation, _) => "video_generation.updated",
    }
}

/// The body of a delivery: `{"id", "type", "created_at", "data"}`, `data` being the task as
/// its format's `GET` answers it now (signed URLs are fresh on every attempt).
pub fn event_body(app: &App, webhook: &Webhook) -> Result<Vec<u8>, String> {
    fn value<R: serde::Serialize>(record: Result<R, ApiError>) -> Result<Value, String> {
        let record =
            record.map_err(|e| format!("the task's record cannot be rendered: {}", e.detail))?;
        serde_json::to_value(record)
            .map_err(|e| format!("the task's record cannot be encoded: {e}"))
    }
    let data = match webhook.task.kind {
        TaskKind::Video => value(Videos::record(app, &webhook.task))?,
        TaskKind::Generation => value(Generations::record(app, &webhook.task))?,
    };
    let event = json!({
        "id": webhook.id,
        "type": event_type(&webhook.task),
        "created_at": webhook.created_ms / 1000,
        "data": data,
    });
    serde_json::to_vec(&event).map_err(|e| format!("encode the event: {e}"))
}

/// Delivers due webhooks until `stop` says so; deliveries under way then are dropped (their
/// leases run out and another claim takes them).
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let config = app.config.webhooks.clone();
    let lease_ms = config.timeout_ms.saturating_add(LEASE_SLACK_MS);
    let limit = usize::try_from(config.concurrency).unwrap_or(16).max(1);
    let pause = Duration::from_millis(config.poll_interval_ms.max(1));
    loop {
        if *stop.borrow() {
            return;
        }
        let claimed = app.store.claim_webhooks(now_ms(), lease_ms, limit).await;
        let batch = match claimed {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!("claiming webhook deliveries: {e}");
                Vec::new()
            }
        };
        let busy = !batch.is_empty();
        if busy {
            let deliveries = join_all(batch.into_iter().map(|w| deliver(&app, &config, w)));
            tokio::select! {
                _ = deliveries => {}
                _ = stop.changed() => return,
            }
            // A full batch may have more behind it: claim again at once.
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Why an attempt got no 2xx.
enum Miss {
    /// Worth another attempt (an answer that was not 2xx, a timeout, a connect error).
    Retry(Option<u16>, String),
    /// Never going to work (the URL is refused by the guard, the event cannot be rendered).
    Final(String),
}

/// One attempt at `webhook`, recorded with what it leads to.
async fn deliver(app: &App, config: &WebhooksConfig, webhook: Webhook) {
    let at_ms = now_ms();
    let started = Instant::now();
    let result = attempt(app, &webhook).await;
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let now = now_ms();
    let (status_code, error, outcome) = match result {
        Ok(code) if (200..300).contains(&code) => (Some(code), None, WebhookOutcome::Delivered),
        Ok(code) => (Some(code), None, next_try(config, &webhook, now)),
        Err(Miss::Retry(code, why)) => (code, Some(why), next_try(config, &webhook, now)),
        Err(Miss::Final(why)) => (None, Some(why), WebhookOutcome::Failed),
    };
    let record = WebhookAttempt {
        at_ms,
        status_code,
        error,
        duration_ms,
    };
    match app
        .store
        .record_webhook_attempt(&webhook.id, &record, outcome)
        .await
    {
        Ok(w) => tracing::debug!(
            webhook = %w.id,
            task = %w.task_id,
            status = w.status.as_str(),
            code = ?status_code,
            "webhook attempt"
        ),
        // The lease runs out and the delivery is tried again.
        Err(e) => tracing::warn!("recording webhook {} attempt: {e}", webhook.id),
    }
}

/// The outcome of a failed attempt: the next one after `retry_initial_ms`, doubled for each
/// attempt before it, capped at `retry_max_ms`; `failed` once it would start past
/// `max_age_secs` after the task ended.
fn next_try(config: &WebhooksConfig, webhook: &Webhook, now: u64) -> WebhookOutcome {
    let before = u32::try_from(webhook.attempts.len())
        .unwrap_or(u32::MAX)
        .min(40);
    let wait = config
        .retry_initial_ms
        .saturating_mul(1u64 << before)
        .min(config.retry_max_ms);
    let at_ms = now.saturating_add(wait);
    let until = webhook
        .created_ms
        .saturating_add(config.max_age_secs.saturating_mul(1000));
    if at_ms > until {
        WebhookOutcome::Failed
    } else {
        WebhookOutcome::Retry { at_ms }
    }
}

/// Signs and posts `webhook`'s event; the receiver's status.
async fn attempt(app: &App, webhook: &Webhook) -> Result<u16, Miss> {
    let secret = match app.store.key(&webhook.owner).await {
        Ok(Some(key)) => key.webhook_secret,
        Ok(None) => return Err(Miss::Final("the task's key no longer exists".to_owned())),
        Err(e) => return Err(Miss::Retry(None, format!("reading the task's key: {e}"))),
    };
    let Some(secret) = secret else {
        return Err(Miss::Retry(
            None,
            "the task's key has no webhook secret (POST /admin/keys/{id}/webhook-secret makes one)"
                .to_owned(),
        ));
    };
    let body = event_body(app, webhook).map_err(Miss::Final)?;
    let timestamp = now_ms() / 1000;
    let signature =
        crate::ground::webhook_signing::signature(&secret, &webhook.id, timestamp, &body)
            .ok_or_else(|| Miss::Retry(None, "the key's webhook secret is malformed".to_owned()))?;
    let header =
        |v: &str| HeaderValue::from_str(v).map_err(|_| Miss::Final(format!("bad header {v:?}")));
    let headers = [
        (HeaderName::from_static("webhook-id"), header(&webhook.id)?),
        (
            HeaderName::from_static("webhook-timestamp"),
            header(&timestamp.to_string())?,
        ),
        (
            HeaderName::from_static("webhook-signature"),
            header(&signature)?,
        ),
    ];
    match app
        .poster
        .post_json(&webhook.url, &headers, body.into())
        .await
    {
        Ok(code) => Ok(code),
        Err(e @ (FetchError::Blocked { .. } | FetchError::InvalidUrl(_))) => {
            Err(Miss::Final(e.to_string()))
        }
        Err(e) => Err(Miss::Retry(None, e.to_string())),
    }
}

/// A delivery as operators see it.
pub fn view(webhook: &Webhook) -> Value {
    let attempts: Vec<Value> = webhook
        .attempts
        .iter()
        .map(|a| {
            json!({
                "at": a.at_ms / 1000, "at_ms": a.at_ms, "status_code": a.status_code,
                "error": a.error, "duration_ms": a.duration_ms,
            })
        })
        .collect();
    json!({
        "id": webhook.id,
        "object": "webhook_delivery",
        "type": event_type(&webhook.task),
        "task_id": webhook.task_id,
        "key_id": webhook.owner,
        "url": webhook.url,
        "status": webhook.status.as_str(),
        "created_at": webhook.created_ms / 1000,
        "next_attempt_at": webhook.next_attempt_ms.map(|ms| ms / 1000),
        "attempts": attempts,
    })
}

/// `GET /admin/webhooks?task_id=&status=&limit=&after=`: deliveries newest first, each with
/// its attempts.
pub async fn list(app: &Arc<App>, query: Option<&str>) -> Answer {
    let invalid = |param: &str, detail: &str| {
        error(&ApiError::field(ErrorCode::InvalidRequest, param, detail))
    };
    let status = match query_param(query, "status").as_deref() {
        None | Some("") => None,
        Some("pending") => Some(WebhookStatus::Pending),
        Some("delivered") => Some(WebhookStatus::Delivered),
        Some("failed") => Some(WebhookStatus::Failed),
        Some(_) => return invalid("status", "status must be pending, delivered or failed"),
    };
    let limit = match query_param(query, "limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(l)) if (1..=1000).contains(&l) => l,
        Some(_) => return invalid("limit", "limit must be from 1 to 1000"),
    };
    let task_id = query_param(query, "task_id").filter(|t| !t.is_empty());
    if task_id
        .as_deref()
        .is_some_and(|t| t.len() > crate::ground::http::MAX_ID_LEN || t.contains('\0'))
    {
        return ok(&json!({"object": "list", "data": [], "has_more": false}));
    }
    let query = WebhookQuery {
        task_id,
        status,
        after: query_param(query, "after").filter(|a| !a.is_empty()),
        limit,
    };
    match app.store.webhooks(&query).await {
        Ok(page) => {
            let data: Vec<Value> = page.items.iter().map(view).collect();
            ok(&json!({"object": "list", "data": data, "has_more": page.has_more}))
        }
        Err(e) => error(&store_unavailable(e)),
    }
}
