//! The admin API (CONTRACT §5.2), behind the admin token.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use hyper::body::Incoming;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Deserialize;
use serde_json::{Value, json};
use store::{AdminTaskQuery, Key, KeyStatus, RateLimit, StoreError, TaskKind, TaskStatus};

use crate::app::{App, new_key};
use crate::ground::http::{Answer, error, full, ok, parse_json, read_body, store_unavailable};
use crate::ops::metrics::{CallLabels, ChannelLabels, CredentialLabels, KindLabels, ScopeLabels};

/// A key as operators see it (never its secret or hash).
pub fn key_record(key: &Key) -> Value {
    json!({
        "id": key.id,
        "object": "key",
        "name": key.name,
        "group": key.group,
        "prefix": key.prefix,
        "quota": key.quota,
        "quota_remaining": key.quota,
        "quota_used": key.quota_used,
        "rate_limit": key.rate_limit.map(|r| json!({"rps": r.rps, "burst": r.burst})),
        "models": key.models,
        "expires_at": key.expires_at,
        "status": match key.status { KeyStatus::Active => "active", KeyStatus::Revoked => "revoked" },
        "created_at": key.created_at,
        "webhook_url": key.webhook_url,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    name: Option<String>,
    group: Option<String>,
    quota: Option<i64>,
    rate_limit: Option<RateLimitBody>,
    models: Option<Vec<String>>,
    expires_at: Option<u64>,
    webhook_url: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitBody {
    rps: u32,
    burst: u32,
}

fn invalid(param: &str, detail: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, param, detail)
}

/// A key's `webhook_url`: an absolute http(s) URL the relay may deliver to.
fn webhook_url(app: &App, value: &Value) -> Result<String, ApiError> {
    let url = value
        .as_str()
        .filter(|s| !s.is_empty() && s.len() <= 2048)
        .ok_or_else(|| {
            invalid(
                "webhook_url",
                "webhook_url must be an absolute http:// or https:// URL of at most 2048 bytes, or null",
            )
        })?;
    crate::ground::webhook_signing::check_url(&app.poster, "webhook_url", url)?;
    Ok(url.to_owned())
}

/// `POST /admin/keys/{id}/webhook-secret`: a new webhook secret for the key, shown this once;
/// deliveries from now on are signed with it.
pub async fn rotate_webhook_secret(app: &Arc<App>, id: &str) -> Answer {
    let secret = crate::ground::webhook_signing::new_secret();
    let rotated = app
        .store
        .update_key(id, &|k| k.webhook_secret = Some(secret.clone()))
        .await;
    match rotated {
        Ok(key) => {
            let mut record = key_record(&key);
            record["webhook_secret"] = Value::String(secret);
            ok(&record)
        }
        Err(StoreError::KeyNotFound(_)) => error(&key_not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `POST /admin/keys`.
pub async fn create_key(app: &Arc<App>, body: Incoming) -> Answer {
    let result = async {
        let bytes = read_body(body, app.config.server.json_limit()).await?;
        let value = parse_json(&bytes)?;
        let req: CreateKey = serde_json::from_value(value)
            .map_err(|e| invalid("body", format!("the key request is not valid: {e}")))?;
        let group = req.group.unwrap_or_else(|| "gen2".into());
        if group.is_empty() || group.len() > 64 {
            return Err(invalid("group", "group must be 1 to 64 characters"));
        }
        if let Some(q) = req.quota
            && !(0..=i64::MAX / 4).contains(&q)
        {
            return Err(invalid(
                "quota",
                "quota must be a whole number of credits >= 0, or null",
            ));
        }
        if let Some(r) = req.rate_limit
            && (r.rps == 0 || r.burst == 0)
        {
            return Err(invalid(
                "rate_limit",
                "rate_limit.rps and rate_limit.burst must be above 0",
            ));
        }
        let webhook_url = match req.webhook_url {
            None | Some(Value::Null) => None,
            Some(v) => Some(webhook_url(app, &v)?),
        };
        let name = req.name.unwrap_or_else(|| "key".into());
        let (mut key, secret) = new_key(&name, &group, req.quota);
        key.webhook_url = webhook_url;
        key.rate_limit = req.rate_limit.map(|r| RateLimit {
            rps: r.rps,
            burst: r.burst,
        });
        key.models = req.models;
        key.expires_at = req.expires_at;
        app.store
            .create_key(&key)
            .await
            .map_err(store_unavailable)?;
        let mut record = key_record(&key);
        record["key"] = Value::String(secret);
        record["webhook_secret"] = key
            .webhook_secret
            .clone()
            .map_or(Value::Null, Value::String);
        Ok(record)
    }
    .await;
    match result {
        Ok(record) => ok(&record),
        Err(e) => error(&e),
    }
}

/// `GET /admin/keys`.
pub async fn list_keys(app: &Arc<App>) -> Answer {
    match app.store.keys().await {
        Ok(keys) => {
            let data: Vec<Value> = keys.iter().map(key_record).collect();
            ok(&json!({"object": "list", "data": data, "has_more": false}))
        }
        Err(e) => error(&store_unavailable(e)),
    }
}

fn key_not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no key {id}"))
}

/// `GET /admin/keys/{id}`.
pub async fn get_key(app: &Arc<App>, id: &str) -> Answer {
    match app.store.key(id).await {
        Ok(Some(key)) => ok(&key_record(&key)),
        Ok(None) => error(&key_not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `DELETE /admin/keys/{id}`: revokes the key (its ledger stays).
pub async fn revoke_key(app: &Arc<App>, id: &str) -> Answer {
    let revoked = app
        .store
        .update_key(id, &|k| k.status = KeyStatus::Revoked)
        .await;
    match revoked {
        Ok(key) => ok(
            &json!({"id": key.id, "object": "key.deleted", "deleted": true, "status": "revoked"}),
        ),
        Err(StoreError::KeyNotFound(_)) => error(&key_not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `GET /admin/keys/{id}/ledger`.
pub async fn ledger(app: &Arc<App>, id: &str) -> Answer {
    let result = match app.store.key(id).await {
        Ok(Some(_)) => app.store.ledger(id).await.map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    match result {
        Ok(Some(entries)) => {
            let data: Vec<Value> = entries
                .iter()
                .map(|e| {
                    json!({"id": e.id, "task_id": e.task_id, "kind": e.kind.as_str(), "amount": e.amount,
                           "balance_after": e.balance_after, "at": e.at})
                })
                .collect();
            ok(&json!({"object": "list", "data": data, "has_more": false}))
        }
        Ok(None) => error(&key_not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// What a `PATCH /admin/keys/{id}` asks, field by field (absent = unchanged).
#[derive(Debug, Default, Clone)]
struct KeyPatch {
    /// `Some(None)` sets unlimited.
    quota: Option<Option<i64>>,
    quota_add: Option<i64>,
    group: Option<String>,
    rate_limit: Option<Option<RateLimit>>,
    models: Option<Option<Vec<String>>>,
    expires_at: Option<Option<u64>>,
    status: Option<KeyStatus>,
    /// `Some(None)` removes it.
    webhook_url: Option<Option<String>>,
}

fn parse_patch(app: &App, value: Value) -> Result<KeyPatch, ApiError> {
    let Value::Object(map) = value else {
        return Err(invalid("body", "the patch must be a JSON object"));
    };
    let mut patch = KeyPatch::default();
    for (name, v) in map {
        match name.as_str() {
            "quota" => {
                patch.quota = Some(match v {
                    Value::Null => None,
                    v => Some(
                        v.as_i64()
                            .filter(|q| (0..=i64::MAX / 4).contains(q))
                            .ok_or_else(|| {
                                invalid(
                                    "quota",
                                    "quota must be a whole number of credits >= 0, or null",
                                )
                            })?,
                    ),
                })
            }
            "quota_add" => {
                patch.quota_add = Some(
                    v.as_i64()
                        .filter(|q| (1..=i64::MAX / 4).contains(q))
                        .ok_or_else(|| {
                            invalid(
                                "quota_add",
                                "quota_add must be a whole number of credits >= 1",
                            )
                        })?,
                )
            }
            "group" => {
                patch.group = Some(
                    v.as_str()
                        .filter(|g| !g.is_empty() && g.len() <= 64)
                        .map(str::to_owned)
                        .ok_or_else(|| invalid("group", "group must be 1 to 64 characters"))?,
                )
            }
            "rate_limit" => {
                patch.rate_limit = Some(match v {
                    Value::Null => None,
                    v => {
                        let r: RateLimitBody = serde_json::from_value(v).map_err(|_| {
                            invalid(
                                "rate_limit",
                                "rate_limit must be {\"rps\": n, \"burst\": n} or null",
                            )
                        })?;
                        if r.rps == 0 || r.burst == 0 {
                            return Err(invalid(
                                "rate_limit",
                                "rate_limit.rps and rate_limit.burst must be above 0",
                            ));
                        }
                        Some(RateLimit {
                            rps: r.rps,
                            burst: r.burst,
                        })
                    }
                })
            }
            "models" => {
                patch.models = Some(match v {
                    Value::Null => None,
                    v => Some(serde_json::from_value(v).map_err(|_| {
                        invalid("models", "models must be an array of model names, or null")
                    })?),
                })
            }
            "expires_at" => {
                patch.expires_at = Some(match v {
                    Value::Null => None,
                    v => Some(v.as_u64().ok_or_else(|| {
                        invalid("expires_at", "expires_at must be Unix seconds, or null")
                    })?),
                })
            }
            "status" => {
                patch.status = Some(match v.as_str() {
                    Some("active") => KeyStatus::Active,
                    Some("revoked") => KeyStatus::Revoked,
                    _ => return Err(invalid("status", "status must be active or revoked")),
                })
            }
            "webhook_url" => {
                patch.webhook_url = Some(match v {
                    Value::Null => None,
                    v => Some(webhook_url(app, &v)?),
                })
            }
            other => {
                return Err(invalid(
                    other,
                    format!(
                        "unknown field {other:?}; a patch takes quota, quota_add, group, rate_limit, models, expires_at, status, webhook_url"
                    ),
                ));
            }
        }
    }
    if patch.quota.is_some() && patch.quota_add.is_some() {
        return Err(invalid("quota_add", "give quota or quota_add, not both"));
    }
    Ok(patch)
}

/// `PATCH /admin/keys/{id}`: applied in one atomic store step, so it cannot lose a
/// concurrent settlement or refund (those move the same record inside their own steps).
pub async fn patch_key(app: &Arc<App>, id: &str, body: Incoming) -> Answer {
    let result = async {
        let bytes = read_body(body, app.config.server.json_limit()).await?;
        let patch = parse_patch(app, parse_json(&bytes)?)?;
        app.store
            .update_key(id, &|k| {
                if let Some(quota) = patch.quota {
                    k.quota = quota;
                }
                if let (Some(add), Some(q)) = (patch.quota_add, k.quota) {
                    k.quota = Some(q.saturating_add(add));
                }
                if let Some(group) = &patch.group {
                    k.group = group.clone();
                }
                if let Some(rate_limit) = patch.rate_limit {
                    k.rate_limit = rate_limit;
                }
                if let Some(models) = &patch.models {
                    k.models = models.clone();
                }
                if let Some(expires_at) = patch.expires_at {
                    k.expires_at = expires_at;
                }
                if let Some(status) = patch.status {
                    k.status = status;
                }
                if let Some(url) = &patch.webhook_url {
                    k.webhook_url = url.clone();
                }
            })
            .await
            .map_err(|e| match e {
                StoreError::KeyNotFound(_) => key_not_found(id),
                e => store_unavailable(e),
            })
    }
    .await;
    match result {
        Ok(key) => ok(&key_record(&key)),
        Err(e) => error(&e),
    }
}

/// `GET /admin/tasks?status=&model=&key_id=&limit=&after=`: tasks of both formats, newest
/// first; `has_more` says whether more match past `limit`, and `after` (a task id, the last
/// one of the page before) continues from there.
pub async fn tasks(app: &Arc<App>, query: Option<&str>) -> Answer {
    use crate::ground::http::query_param;
    let status = query_param(query, "status");
    let model = query_param(query, "model");
    let key_id = query_param(query, "key_id");
    let after = query_param(query, "after").filter(|a| !a.is_empty());
    let limit = match query_param(query, "limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(l)) if (1..=1000).contains(&l) => l,
        Some(_) => {
            return error(&invalid("limit", "limit must be from 1 to 1000"));
        }
    };
    // A status of either format: `in_progress` and `completed` are the first format's names.
    let (status, kind) = match status.as_deref() {
        None => (None, None),
        Some("in_progress") => (Some(TaskStatus::Running), Some(TaskKind::Video)),
        Some("completed") => (Some(TaskStatus::Succeeded), Some(TaskKind::Video)),
        Some("queued") => (Some(TaskStatus::Queued), None),
        Some("running") => (Some(TaskStatus::Running), None),
        Some("succeeded") => (Some(TaskStatus::Succeeded), None),
        Some("failed") => (Some(TaskStatus::Failed), None),
        Some("cancelled") => (Some(TaskStatus::Cancelled), None),
        // No task has any other status.
        Some(_) => return ok(&json!({"object": "list", "data": [], "has_more": false})),
    };
    let query = AdminTaskQuery {
        status,
        kind,
        model,
        owner: key_id,
        after,
        limit,
    };
    let page = match app.store.admin_tasks(&query).await {
        Ok(page) => page,
        Err(e) => return error(&store_unavailable(e)),
    };
    let has_more = page.has_more;
    let data: Vec<Value> = page
        .items
        .iter()
        .map(|t| {
            json!({
                "id": t.id, "kind": match t.kind { store::TaskKind::Video => "video", store::TaskKind::Generation => "video.generation" },
                "key_id": t.owner, "model": t.model, "status": admin_status(t), "progress": t.progress,
                "channel": t.channel, "price": t.price, "created_at": t.created_at,
                "updated_at": t.updated_at, "completed_at": t.completed_at, "error": t.error.as_ref().map(|e| json!({"code": e.code, "message": e.message})),
            })
        })
        .collect();
    ok(&json!({"object": "list", "data": data, "has_more": has_more}))
}

fn status_name(status: store::TaskStatus) -> &'static str {
    match status {
        store::TaskStatus::Queued => "queued",
        store::TaskStatus::Running => "running",
        store::TaskStatus::Succeeded => "succeeded",
        store::TaskStatus::Failed => "failed",
        store::TaskStatus::Cancelled => "cancelled",
    }
}

/// A task's status as its own format names it.
fn admin_status(task: &store::Task) -> &'static str {
    match (task.kind, task.status) {
        (store::TaskKind::Video, store::TaskStatus::Running) => "in_progress",
        (store::TaskKind::Video, store::TaskStatus::Succeeded) => "completed",
        (_, status) => status_name(status),
    }
}

/// `GET /admin/channels`: each channel's health, tasks in flight and error rate.
pub async fn channels(app: &Arc<App>) -> Answer {
    let unfinished = app.store.unfinished_tasks(usize::MAX).await;
    let unfinished = match unfinished {
        Ok(t) => t,
        Err(e) => return error(&store_unavailable(e)),
    };
    let routing = app.engine.routing();
    let data: Vec<Value> = app
        .engine
        .channels()
        .iter()
        .map(|c| {
            let in_flight = unfinished
                .iter()
                .filter(|t| t.channel.as_deref() == Some(c.name()))
                .count();
            let stats = app.channel_stats.get(c.name());
            let (calls, failures) = stats.map(|s| s.totals()).unwrap_or((0, 0));
            let count = |pick: fn(&engine::Health) -> &std::sync::atomic::AtomicU64| {
                routing
                    .health(c.name())
                    .map_or(0, |h| pick(h).load(std::sync::atomic::Ordering::Relaxed))
            };
            let health = routing.health(c.name());
            json!({
                "name": c.name(), "kind": c.kind(), "healthy": routing.is_healthy(c.name()),
                "max_concurrency": health.map(|h| h.max_concurrency),
                "max_calls_per_sec": health.and_then(|h| h.rate.as_ref()).map(|r| r.per_sec()),
                "calls_paced": count(|h| &h.calls_paced),
                "in_flight": in_flight, "calls": calls, "failures": failures,
                "error_rate": if calls == 0 { 0.0 } else { failures as f64 / calls as f64 },
                "marked_unhealthy": count(|h| &h.marked_unhealthy),
                "restored": count(|h| &h.restored),
                "failovers": count(|h| &h.failovers),
            })
        })
        .collect();
    ok(&json!({"object": "list", "data": data}))
}

/// `GET /metrics` (the admin token is checked by the router).
pub async fn metrics(app: &Arc<App>) -> Answer {
    let counts = match app.store.task_counts().await {
        Ok(counts) => counts,
        Err(e) => return error(&store_unavailable(e)),
    };
    let mut registry = Registry::with_prefix("relay");
    app.metrics.register(&mut registry);
    app.engine.metrics().register(&mut registry);

    let tasks = Family::<engine::metrics::TaskLabels, Gauge>::default();
    for c in counts {
        tasks
            .get_or_create(&engine::metrics::TaskLabels::of(c.kind, c.status))
            .set(i64::try_from(c.count).unwrap_or(i64::MAX));
    }
    registry.register("tasks", "Tasks in the store, by format and status", tasks);

    let calls = Family::<CallLabels, Counter>::default();
    for (name, stats) in app.channel_stats.iter() {
        let (all, failures) = stats.totals();
        for (outcome, n) in [("ok", all.saturating_sub(failures)), ("error", failures)] {
            calls
                .get_or_create(&CallLabels {
                    channel: name.clone(),
                    outcome,
                })
                .inc_by(n);
        }
    }
    registry.register(
        "upstream_calls",
        "Upstream calls made by this instance, by channel and outcome",
        calls,
    );
    let healthy = Family::<ChannelLabels, Gauge>::default();
    let routing = app.engine.routing();
    for channel in app.engine.channels() {
        healthy
            .get_or_create(&ChannelLabels {
                channel: channel.name().to_owned(),
            })
            .set(i64::from(routing.is_healthy(channel.name())));
    }
    registry.register(
        "channel_healthy",
        "Whether a video channel is routed to (1) or resting after failures (0)",
        healthy,
    );

    let refused = Family::<ScopeLabels, Counter>::default();
    let throttled = ("auth_failures", app.auth_throttle.throttled());
    for (scope, n) in app.limiter.refusals().into_iter().chain([throttled]) {
        refused.get_or_create(&ScopeLabels { scope }).inc_by(n);
    }
    registry.register(
        "rate_limited",
        "Requests refused by a rate limit, by scope (a key's requests, a key's polls, one task's polls, a source's failed authentications)",
        refused,
    );
    let buckets = Family::<KindLabels, Gauge>::default();
    let (keys, tasks) = app.limiter.buckets();
    let sources = app.auth_throttle.sources();
    for (kind, n) in [("key", keys), ("task", tasks), ("auth_source", sources)] {
        buckets
            .get_or_create(&KindLabels { kind })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    registry.register(
        "rate_limit_buckets",
        "Rate-limit buckets held in this instance (keys', tasks', and failed-authentication sources')",
        buckets,
    );
    let failures = Family::<CredentialLabels, Counter>::default();
    for (credential, n) in app.auth_throttle.failures() {
        failures
            .get_or_create(&CredentialLabels { credential })
            .inc_by(n);
    }
    registry.register(
        "auth_failures",
        "Presented credentials not accepted, by credential (API key, admin token)",
        failures,
    );
    let open = Gauge::<i64>::default();
    if let Some(gate) = app.metrics.gate.get() {
        open.set(i64::try_from(gate.open()).unwrap_or(i64::MAX));
    }
    registry.register("open_connections", "Client connections open", open);

    let mut text = String::with_capacity(16 * 1024);
    if let Err(e) = prometheus_text::encode(&mut text, &registry) {
        tracing::error!("encoding the metrics: {e}");
        return error(&ApiError::new(
            ErrorCode::Unavailable,
            "the metrics could not be encoded",
        ));
    }
    let mut res = http::Response::new(full(text));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(prometheus_text::CONTENT_TYPE),
    );
    res
}
