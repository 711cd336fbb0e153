//! The Message Batches API (`/v1/messages/batches`): create, list, retrieve, cancel, delete
//! and the results file. Batches are the key's own (another key's is `404`), kept in the
//! store; [`crate::formats::batch_run`] runs their requests. Errors are in the vendor's shape, as on
//! `/v1/messages`.

use std::sync::Arc;

use bytes::Bytes;
use channels::ChatChannel;
use engine::now_ms;
use error_codes::{ApiError, ErrorCode};
use http::header::{self, HeaderValue};
use http::request::Parts;
use http::{Response, StatusCode};
use messages::batches::{
    BatchList, BatchResultLine, DeletedBatch, MessageBatch, ProcessingStatus, RequestCounts,
    validate_batch,
};
use store::{Batch, BatchCounts, BatchItem, BatchStatus, Key, Params, StoreError};

use crate::app::App;
use crate::config::ModelKind;
use crate::formats::chat_billing::{Bill, cost};
use crate::formats::idempotency::{Hashed, Idem};
use crate::formats::messages::{request_id, vendor_error};
use crate::ground::auth::may_use_model;
use crate::ground::http::{Answer, json, query_param, read_body, store_unavailable};
use crate::ground::limits::rfc3339;

/// How long a batch's requests may wait to run before they end `expired`.
pub const EXPIRES_MS: u64 = 24 * 60 * 60 * 1000;
/// Results read from the store per piece of the results file.
const RESULTS_PAGE: usize = 256;

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("message batch {id} not found"))
}

/// The channel that runs `model` for `key`'s batches: a chat model the key may use. Each
/// request of a batch is one call of the channel, as a `/v1/messages` call is (on a native
/// channel, the request as the client wrote it).
pub(crate) fn channel_for(app: &App, key: &Key, model: &str) -> Result<Arc<ChatChannel>, ApiError> {
    let is_chat = app
        .config
        .models
        .get(model)
        .is_some_and(|m| m.kind == ModelKind::Chat);
    if !is_chat || !may_use_model(key, model) {
        return Err(ApiError::field(
            ErrorCode::InvalidModel,
            "model",
            format!("model: {model} is not a chat model this key may use"),
        ));
    }
    let channel = app
        .chat_channels
        .iter()
        .find(|c| c.serves(model))
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("no channel serves model {model} now"),
            )
        })?;
    Ok(channel)
}

/// The base of URLs handed out: `server.public_base_url`, else the request's `Host`.
fn base_url(app: &App, parts: &Parts) -> String {
    let configured = app.config.server.public_base_url.trim_end_matches('/');
    if !configured.is_empty() {
        return configured.to_owned();
    }
    match parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
    {
        Some(host) => format!("http://{host}"),
        None => app.public_base_url(),
    }
}

fn time(ms: u64) -> String {
    rfc3339((ms / 1000) as i64)
}

/// A batch as the API shows it.
fn wire(batch: &Batch, base: &str) -> MessageBatch {
    let c: BatchCounts = batch.counts;
    MessageBatch {
        id: batch.id.clone(),
        kind: "message_batch".to_owned(),
        processing_status: match batch.status {
            BatchStatus::InProgress => ProcessingStatus::InProgress,
            BatchStatus::Canceling => ProcessingStatus::Canceling,
            BatchStatus::Ended => ProcessingStatus::Ended,
        },
        request_counts: RequestCounts {
            processing: c.processing,
            succeeded: c.succeeded,
            errored: c.errored,
            canceled: c.canceled,
            expired: c.expired,
        },
        ended_at: batch.ended_ms.map(time),
        created_at: time(batch.created_ms),
        expires_at: time(batch.expires_ms),
        archived_at: None,
        cancel_initiated_at: batch.cancel_ms.map(time),
        results_url: (batch.status == BatchStatus::Ended)
            .then(|| format!("{base}/v1/messages/batches/{}/results", batch.id)),
    }
}

/// `POST /v1/messages/batches`.
pub async fn create(
    app: &Arc<App>,
    key: &Key,
    parts: &Parts,
    body: Hashed,
    idem: &mut Idem,
) -> Answer {
    let rid = request_id(parts);
    match try_create(app, key, parts, body, idem).await {
        Ok(batch) => json(StatusCode::OK, &wire(&batch, &base_url(app, parts))),
        Err(e) => vendor_error(&e, &rid),
    }
}

async fn try_create(
    app: &Arc<App>,
    key: &Key,
    parts: &Parts,
    body: Hashed,
    idem: &mut Idem,
) -> Result<Batch, ApiError> {
    let body = read_body(body, app.config.server.json_limit()).await?;
    idem.claim(app).await?;
    let version = crate::formats::messages::version(parts)?;
    let value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "body",
            format!("body: not valid JSON: {e}"),
        )
    })?;
    let requests = validate_batch(&value)?;
    let mut estimate: i64 = 0;
    let mut simulated = false;
    for (i, r) in requests.iter().enumerate() {
        let channel = channel_for(app, key, &r.request.model).map_err(|e| ApiError {
            param: Some(format!("requests[{i}].params.model")),
            detail: format!("requests[{i}].params.{}", e.detail),
            ..e
        })?;
        simulated |= channel.is_simulator();
        let input = messages::tokens::count_request(&r.request);
        let most = cost(
            app,
            &r.request.model,
            input,
            r.request.max_tokens.unwrap_or(0),
        );
        estimate = estimate.saturating_add(most);
    }
    let sim = if simulated && app.sim_scenarios() {
        // Checked now, so that a bad header is this request's error, not every result's.
        crate::ground::http::sim_directives(true, &parts.headers)?;
        parts
            .headers
            .get("x-relay-sim")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    } else {
        None
    };
    let id = crate::ground::http::new_id("msgbatch");
    // The key must cover the whole batch now; each request reserves its own estimate again
    // when it runs.
    let fits = Bill::open(app, key, &id, "", estimate).await;
    match fits {
        Ok(bill) => drop(bill),
        Err(e) if e.code == ErrorCode::InsufficientQuota => {
            return Err(ApiError::new(
                ErrorCode::InsufficientQuota,
                format!(
                    "this batch may cost up to {estimate} credits (its requests' input and max_tokens); the key cannot cover it"
                ),
            ));
        }
        Err(e) => return Err(e),
    }
    let mut items = Vec::with_capacity(requests.len());
    for (index, r) in requests.iter().enumerate() {
        let params = Params::new(&r.params).map_err(|e| {
            tracing::error!("serialising a batch request: {e}");
            ApiError::new(ErrorCode::UpstreamError, "internal error")
        })?;
        items.push(BatchItem {
            index: u32::try_from(index).unwrap_or(u32::MAX),
            custom_id: r.custom_id.clone(),
            params,
            result: None,
        });
    }
    let now = now_ms();
    let batch = Batch {
        id,
        owner: key.id.clone(),
        status: BatchStatus::InProgress,
        counts: BatchCounts {
            processing: items.len() as u64,
            ..BatchCounts::default()
        },
        created_ms: now,
        expires_ms: now + EXPIRES_MS,
        ended_ms: None,
        cancel_ms: None,
        version: version.to_owned(),
        sim,
    };
    // With a claimed `Idempotency-Key`, the answer is kept with the key in the batch's own
    // store step, so a retry answers this batch whatever stops the process afterwards.
    let stored = match idem.claimed_ticket() {
        Some(ticket) => {
            let kept =
                crate::formats::idempotency::task_answer(&wire(&batch, &base_url(app, parts)))?;
            app.store
                .create_batch_idempotent(&batch, &items, ticket, &kept)
                .await
        }
        None => app.store.create_batch(&batch, &items).await,
    };
    match stored {
        Ok(()) => idem.kept(),
        Err(StoreError::IdempotencyLost(_)) => {
            return Err(crate::formats::idempotency::conflict(
                "was taken over by a later request while this one was handled",
            ));
        }
        Err(e) => return Err(store_unavailable(e)),
    }
    app.batch_wake.notify_one();
    Ok(batch)
}

/// The key's batch `id`.
async fn owned(app: &App, key: &Key, id: &str) -> Result<Batch, ApiError> {
    if id.len() > crate::ground::http::MAX_ID_LEN {
        return Err(not_found(id));
    }
    match app.store.batch(id).await.map_err(store_unavailable)? {
        Some(batch) if batch.owner == key.id => Ok(batch),
        _ => Err(not_found(id)),
    }
}

/// `GET /v1/messages/batches/{id}`.
pub async fn get(app: &Arc<App>, key: &Key, parts: &Parts, id: &str) -> Answer {
    match owned(app, key, id).await {
        Ok(batch) => json(StatusCode::OK, &wire(&batch, &base_url(app, parts))),
        Err(e) => vendor_error(&e, &request_id(parts)),
    }
}

/// `GET /v1/messages/batches?limit=&after_id=&before_id=`: newest first.
pub async fn list(app: &Arc<App>, key: &Key, parts: &Parts) -> Answer {
    let rid = request_id(parts);
    let query = parts.uri.query();
    let limit = match query_param(query, "limit") {
        None => 20,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=1000).contains(&n) => n,
            _ => {
                return vendor_error(
                    &ApiError::field(
                        ErrorCode::InvalidRequest,
                        "limit",
                        format!("limit: must be an integer from 1 to 1000, got {v:?}"),
                    ),
                    &rid,
                );
            }
        },
    };
    let after = query_param(query, "after_id");
    let before = query_param(query, "before_id");
    let page = match app
        .store
        .list_batches(&key.id, after.as_deref(), before.as_deref(), limit)
        .await
    {
        Ok(page) => page,
        Err(e) => return vendor_error(&store_unavailable(e), &rid),
    };
    let base = base_url(app, parts);
    let data: Vec<MessageBatch> = page.items.iter().map(|b| wire(b, &base)).collect();
    json(
        StatusCode::OK,
        &BatchList {
            first_id: data.first().map(|b| b.id.clone()),
            last_id: data.last().map(|b| b.id.clone()),
            has_more: page.has_more,
            data,
        },
    )
}

/// `POST /v1/messages/batches/{id}/cancel`: an `in_progress` batch becomes `canceling`; its
/// requests not yet run end `canceled`. A batch canceling or ended is answered as it is.
pub async fn cancel(app: &Arc<App>, key: &Key, parts: &Parts, id: &str) -> Answer {
    let rid = request_id(parts);
    if let Err(e) = owned(app, key, id).await {
        return vendor_error(&e, &rid);
    }
    match app.store.cancel_batch(id, now_ms()).await {
        Ok(Some(batch)) => {
            app.batch_wake.notify_one();
            json(StatusCode::OK, &wire(&batch, &base_url(app, parts)))
        }
        Ok(None) => vendor_error(&not_found(id), &rid),
        Err(e) => vendor_error(&store_unavailable(e), &rid),
    }
}

/// `DELETE /v1/messages/batches/{id}`: only an ended batch (`409` otherwise: cancel it first).
pub async fn delete(app: &Arc<App>, key: &Key, parts: &Parts, id: &str) -> Answer {
    let rid = request_id(parts);
    let batch = match owned(app, key, id).await {
        Ok(batch) => batch,
        Err(e) => return vendor_error(&e, &rid),
    };
    if batch.status != BatchStatus::Ended {
        return vendor_error(
            &ApiError::new(
                ErrorCode::TaskNotCompleted,
                format!(
                    "message batch {id} is {}: only an ended batch can be deleted; cancel it first",
                    batch.status.as_str()
                ),
            ),
            &rid,
        );
    }
    match app.store.delete_batch(id).await {
        Ok(_) => json(
            StatusCode::OK,
            &DeletedBatch {
                id: id.to_owned(),
                kind: "message_batch_deleted".to_owned(),
            },
        ),
        Err(e) => vendor_error(&store_unavailable(e), &rid),
    }
}

/// `GET /v1/messages/batches/{id}/results`: one JSON line per request, in request order,
/// read from the store a page at a time as the body is sent.
pub async fn results(app: &Arc<App>, key: &Key, parts: &Parts, id: &str) -> Answer {
    let rid = request_id(parts);
    let batch = match owned(app, key, id).await {
        Ok(batch) => batch,
        Err(e) => return vendor_error(&e, &rid),
    };
    if batch.status != BatchStatus::Ended {
        return vendor_error(
            &ApiError::new(
                ErrorCode::TaskNotCompleted,
                format!(
                    "message batch {id} is {}: its results are ready once it has ended",
                    batch.status.as_str()
                ),
            ),
            &rid,
        );
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    let (app, id) = (app.clone(), id.to_owned());
    tokio::spawn(async move {
        let mut from = 0u32;
        loop {
            let page = match app.store.batch_items(&id, from, RESULTS_PAGE).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::error!("batch {id}: reading results: {e}");
                    let _ = tx.send(Err(std::io::Error::other("store"))).await;
                    return;
                }
            };
            let Some(last) = page.last().map(|i| i.index) else {
                return;
            };
            let full = page.len() == RESULTS_PAGE;
            let mut text = Vec::with_capacity(page.len() * 256);
            for item in &page {
                let Some(outcome) = &item.result else {
                    continue;
                };
                let line = BatchResultLine {
                    custom_id: &item.custom_id,
                    result: outcome.result.raw(),
                };
                if serde_json::to_writer(&mut text, &line).is_ok() {
                    text.push(b'\n');
                }
            }
            if tx.send(Ok(Bytes::from(text))).await.is_err() || !full {
                return;
            }
            from = last + 1;
        }
    });
    let body = http_body_util::StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async {
        rx.recv()
            .await
            .map(|piece| (piece.map(hyper::body::Frame::data), rx))
    }));
    let mut res = Response::new(http_body_util::BodyExt::boxed_unsync(body));
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-jsonl"),
    );
    res
}
