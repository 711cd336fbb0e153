//! The admin API (CONTRACT §5.2), behind the admin token.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::{Value, json};
use store::{Key, KeyStatus, RateLimit, StoreError};

use crate::app::{App, new_key};
use crate::http::{Answer, error, ok, parse_json, read_body};
use crate::tasks::{blocking, store_unavailable};

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

/// `POST /admin/keys`.
pub async fn create_key(app: &Arc<App>, body: Incoming) -> Answer {
    let result = async {
        let bytes = read_body(body, app.config.server.max_body_bytes).await?;
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
        let name = req.name.unwrap_or_else(|| "key".into());
        let (mut key, secret) = new_key(&name, &group, req.quota);
        key.rate_limit = req.rate_limit.map(|r| RateLimit {
            rps: r.rps,
            burst: r.burst,
        });
        key.models = req.models;
        key.expires_at = req.expires_at;
        let stored = key.clone();
        blocking(app, move |s| s.create_key(&stored))
            .await
            .map_err(store_unavailable)?;
        let mut record = key_record(&key);
        record["key"] = Value::String(secret);
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
    match blocking(app, |s| s.keys()).await {
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
    let owned = id.to_owned();
    match blocking(app, move |s| s.key(&owned)).await {
        Ok(Some(key)) => ok(&key_record(&key)),
        Ok(None) => error(&key_not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `DELETE /admin/keys/{id}`: revokes the key (its ledger stays).
pub async fn revoke_key(app: &Arc<App>, id: &str) -> Answer {
    let owned = id.to_owned();
    match blocking(app, move |s| {
        s.update_key(&owned, &|k| k.status = KeyStatus::Revoked)
    })
    .await
    {
        Ok(key) => ok(
            &json!({"id": key.id, "object": "key.deleted", "deleted": true, "status": "revoked"}),
        ),
        Err(StoreError::KeyNotFound(_)) => error(&key_not_found(id)),
        Err(e) => error(&store_unavailable(e)),
    }
}

/// `GET /admin/keys/{id}/ledger`.
pub async fn ledger(app: &Arc<App>, id: &str) -> Answer {
    let owned = id.to_owned();
    let result = blocking(app, move |s| {
        let key = s.key(&owned)?;
        key.map(|_| s.ledger(&owned)).transpose()
    })
    .await;
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
