//! Webhooks of finished tasks: the event a task's end announces (rendered as its format's
//! `GET` answers the task), the delivery worker (claims due deliveries from the store's outbox
//! with a lease, signs and posts them, records each attempt, retries with exponential backoff
//! for a bounded time) and the operators' listing, `GET /admin/webhooks`.
//!
//! The store writes a task's webhook in the transaction that ends the task, so a delivery is
//! never lost to a crash; a lease that runs out (its holder died mid-delivery) hands the
//! delivery to the next claim, which may deliver it again: at least once, the same
//! `webhook-id` each time.
//!
//! Deliveries are independent: each runs on its own, and a slot that frees is filled at once
//! by another claim (never a batch waiting for its slowest). Under way at once: at most
//! `concurrency` in all, `per_receiver_concurrency` per receiver (the URL's origin) and
//! `per_key_concurrency` per key, so a slow or dead receiver, or one key's many, hold only
//! their own share. A claim passes over the due deliveries of a receiver or key at its cap,
//! leaving them due; past [`PASSED_PER_LANE`] of one in a claim, it puts the rest off by one
//! attempt's timeout (no attempt recorded), so a backlog of one never hides another's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::now_ms;
use error_codes::{ApiError, ErrorCode};
use fetch::FetchError;
use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::{HeaderName, HeaderValue};
use serde_json::{Value, json};
use store::{
    DueWebhook, Task, TaskKind, TaskStatus, Webhook, WebhookAttempt, WebhookOutcome, WebhookPick,
    WebhookQuery, WebhookStatus,
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

/// Due deliveries a claim looks at, at most.
const CLAIM_SCAN: usize = 1_024;

/// Due deliveries of one receiver or key at its cap that a claim passes over, leaving them
/// due, before it puts the rest of them off.
pub const PASSED_PER_LANE: u32 = 64;

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

/// A receiver's origin (`scheme://host:port`, lowercase), the unit of the per-receiver cap;
/// a URL that does not parse is a receiver of its own.
fn origin(url: &str) -> String {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return url.to_owned();
    };
    let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
        return url.to_owned();
    };
    let scheme = scheme.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    format!("{scheme}://{}:{port}", host.to_ascii_lowercase())
}

/// Who a delivery counts against: its receiver and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lane {
    receiver: String,
    key: String,
}

impl Lane {
    fn of(owner: &str, url: &str) -> Lane {
        Lane {
            receiver: origin(url),
            key: owner.to_owned(),
        }
    }
}

/// The caps of deliveries under way in this instance.
#[derive(Debug, Clone, Copy)]
struct Caps {
    total: usize,
    per_receiver: u32,
    per_key: u32,
}

impl Caps {
    fn of(config: &WebhooksConfig) -> Caps {
        let count = |n: u32| n.max(1);
        Caps {
            total: usize::try_from(config.concurrency).unwrap_or(16).max(1),
            per_receiver: count(config.per_receiver_concurrency),
            per_key: count(config.per_key_concurrency),
        }
    }
}

/// Deliveries under way, counted in all, per receiver and per key.
#[derive(Debug, Clone, Default)]
struct UnderWay {
    total: usize,
    receivers: HashMap<String, u32>,
    keys: HashMap<String, u32>,
}

impl UnderWay {
    fn add(&mut self, lane: &Lane) {
        self.total += 1;
        *self.receivers.entry(lane.receiver.clone()).or_default() += 1;
        *self.keys.entry(lane.key.clone()).or_default() += 1;
    }

    fn remove(&mut self, lane: &Lane) {
        self.total = self.total.saturating_sub(1);
        for (map, name) in [
            (&mut self.receivers, &lane.receiver),
            (&mut self.keys, &lane.key),
        ] {
            if let Some(n) = map.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(name);
                }
            }
        }
    }

    /// The cap `lane` is at (`receiver:` or `key:` and its name), if any.
    fn full(&self, caps: &Caps, lane: &Lane) -> Option<String> {
        let at = |map: &HashMap<String, u32>, name: &str, cap: u32| {
            map.get(name).copied().unwrap_or(0) >= cap
        };
        if at(&self.receivers, &lane.receiver, caps.per_receiver) {
            Some(format!("receiver:{}", lane.receiver))
        } else if at(&self.keys, &lane.key, caps.per_key) {
            Some(format!("key:{}", lane.key))
        } else {
            None
        }
    }
}

/// The choice of one claim, given what is under way: due deliveries taken while the caps have
/// room, those of a receiver or key at its cap passed over ([`PASSED_PER_LANE`] of each), then
/// put off until `defer_to`.
struct Chooser {
    caps: Caps,
    /// What is under way, with what this claim took added.
    counts: UnderWay,
    passed: HashMap<String, u32>,
    defer_to: u64,
}

impl Chooser {
    fn pick(&mut self, due: &DueWebhook<'_>) -> WebhookPick {
        if self.counts.total >= self.caps.total {
            return WebhookPick::Stop;
        }
        let lane = Lane::of(due.owner, due.url);
        let Some(full) = self.counts.full(&self.caps, &lane) else {
            self.counts.add(&lane);
            return WebhookPick::Take;
        };
        let passed = self.passed.entry(full).or_default();
        if *passed < PASSED_PER_LANE {
            *passed += 1;
            WebhookPick::Skip
        } else {
            WebhookPick::Defer {
                at_ms: self.defer_to,
            }
        }
    }
}

/// Delivers due webhooks until `stop` says so; deliveries under way then are dropped (their
/// leases run out and another claim takes them).
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let config = app.config.webhooks.clone();
    let lease_ms = config.timeout_ms.saturating_add(LEASE_SLACK_MS);
    let caps = Caps::of(&config);
    let pause = Duration::from_millis(config.poll_interval_ms.max(1));
    let mut under_way = UnderWay::default();
    let mut deliveries = FuturesUnordered::new();
    // Each turn claims for the free slots, then waits for a delivery to end or a pause.
    loop {
        if *stop.borrow() {
            return;
        }
        if under_way.total < caps.total {
            let now = now_ms();
            let mut chooser = Chooser {
                caps,
                counts: under_way.clone(),
                passed: HashMap::new(),
                defer_to: now.saturating_add(config.timeout_ms),
            };
            let mut pick = |due: &DueWebhook<'_>| chooser.pick(due);
            match app
                .store
                .pick_webhooks(now, lease_ms, CLAIM_SCAN, &mut pick)
                .await
            {
                Ok(claimed) => {
                    for webhook in claimed {
                        let lane = Lane::of(&webhook.owner, &webhook.url);
                        under_way.add(&lane);
                        let (app, config) = (&app, &config);
                        deliveries.push(async move {
                            deliver(app, config, webhook).await;
                            lane
                        });
                    }
                }
                Err(e) => tracing::warn!("claiming webhook deliveries: {e}"),
            }
        }
        tokio::select! {
            Some(lane) = deliveries.next(), if !deliveries.is_empty() => {
                under_way.remove(&lane);
                // Every other delivery that has ended too, before one claim for their slots.
                while let Some(Some(lane)) = deliveries.next().now_or_never() {
                    under_way.remove(&lane);
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_is_its_urls_origin() {
        for (url, expected) in [
            ("https://Hooks.Example/a?b=c", "https://hooks.example:443"),
            (
                "https://hooks.example:443/other",
                "https://hooks.example:443",
            ),
            ("http://hooks.example/a", "http://hooks.example:80"),
            ("http://127.0.0.1:9000/x", "http://127.0.0.1:9000"),
            ("http://[::1]:81/x", "http://[::1]:81"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(origin(url), expected, "{url}");
        }
    }

    fn due<'a>(owner: &'a str, url: &'a str) -> DueWebhook<'a> {
        DueWebhook {
            id: "evt_1",
            owner,
            url,
        }
    }

    #[test]
    fn a_claim_takes_within_the_caps_passes_over_then_puts_off() {
        let caps = Caps {
            total: 4,
            per_receiver: 2,
            per_key: 3,
        };
        let mut chooser = Chooser {
            caps,
            counts: UnderWay::default(),
            passed: HashMap::new(),
            defer_to: 99,
        };
        let slow = "https://slow.example/hook";
        assert_eq!(chooser.pick(&due("a", slow)), WebhookPick::Take);
        assert_eq!(chooser.pick(&due("a", slow)), WebhookPick::Take);
        // The receiver is at its cap: passed over, PASSED_PER_LANE times, then put off.
        for _ in 0..PASSED_PER_LANE {
            assert_eq!(chooser.pick(&due("b", slow)), WebhookPick::Skip);
        }
        assert_eq!(
            chooser.pick(&due("b", slow)),
            WebhookPick::Defer { at_ms: 99 }
        );
        // Key `a` has one more slot (3), on another receiver.
        assert_eq!(
            chooser.pick(&due("a", "https://other.example/")),
            WebhookPick::Take
        );
        assert_eq!(
            chooser.pick(&due("a", "https://third.example/")),
            WebhookPick::Skip
        );
        // The last slot in all goes to another key; then the claim stops.
        assert_eq!(
            chooser.pick(&due("c", "https://third.example/")),
            WebhookPick::Take
        );
        assert_eq!(
            chooser.pick(&due("d", "https://fourth.example/")),
            WebhookPick::Stop
        );
        // Ended deliveries free their slots.
        let mut under_way = chooser.counts.clone();
        under_way.remove(&Lane::of("a", slow));
        assert_eq!(under_way.total, 3);
        assert_eq!(under_way.full(&caps, &Lane::of("b", slow)), None);
        under_way.remove(&Lane::of("a", slow));
        assert!(!under_way.receivers.contains_key(&origin(slow)));
    }
}
