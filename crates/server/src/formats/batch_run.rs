//! Running message batches: each batch's requests not yet ended run in the background, a few
//! at a time, each billed as a `/v1/messages` call is (its estimate reserved while it runs,
//! its usage charged). A request's result and its charge are recorded in one store step
//! ([`store::Store::record_batch_results`]), which skips a request that has a result: a
//! request runs again after a restart only when its result was not recorded, and is charged
//! once whatever happens.
//!
//! A canceled batch runs no more requests: once those under way have ended, the rest end
//! `canceled`; past its `expires_ms` they end `expired`. Neither is charged.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use channels::{ChatAnswer, ChatCall, FailureKind, SimDirectives};
use engine::now_ms;
use error_codes::{ApiError, ErrorCode};
use messages::{Checked, Endpoint, Usage};
use serde_json::{Value, json};
use store::{
    Batch, BatchItem, BatchOutcome, BatchResult, BatchResultKind, BatchStatus, Charge, Key, Params,
};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::app::App;
use crate::formats::chat_billing::{Bill, cost};

/// Requests of one batch under way at once.
pub const CONCURRENCY: usize = 4;
/// Requests read from the store per step.
const PAGE: usize = 500;
/// How often the batches not ended are looked for without being woken (a batch whose runner
/// failed, or one another relay sharing the store left when it stopped).
const RESCAN: Duration = Duration::from_secs(30);
/// Attempts at recording a result before it is left for a later run.
const RECORD_ATTEMPTS: u32 = 5;

/// Runs the batches not ended until `stop`: those in the store when it starts, and each one
/// created meanwhile ([`App::batch_wake`]).
pub async fn run(app: Arc<App>, mut stop: watch::Receiver<bool>) {
    let mut running: JoinSet<String> = JoinSet::new();
    let mut ids: HashSet<String> = HashSet::new();
    loop {
        if *stop.borrow() {
            break;
        }
        match app.store.open_batches(10_000).await {
            Ok(open) => {
                for batch in open {
                    if ids.insert(batch.id.clone()) {
                        let (app, stop) = (app.clone(), stop.clone());
                        running.spawn(async move {
                            let id = batch.id.clone();
                            run_batch(&app, batch, stop).await;
                            id
                        });
                    }
                }
            }
            Err(e) => tracing::warn!("reading the open batches: {e}"),
        }
        loop {
            tokio::select! {
                () = app.batch_wake.notified() => break,
                () = tokio::time::sleep(RESCAN) => break,
                _ = stop.changed() => break,
                Some(done) = running.join_next() => {
                    if let Ok(id) = done {
                        ids.remove(&id);
                    }
                }
            }
        }
    }
    // The runners see `stop` too: requests under way are dropped (run again after a restart).
    while running.join_next().await.is_some() {}
}

/// Runs one batch's requests that have no result until it ended or `stop`.
async fn run_batch(app: &Arc<App>, batch: Batch, stop: watch::Receiver<bool>) {
    let id = batch.id.clone();
    let pending = match pending_items(app, &id).await {
        Ok(items) => items,
        Err(e) => {
            tracing::warn!("batch {id}: reading its requests: {e}");
            return;
        }
    };
    let key = match app.store.key(&batch.owner).await {
        Ok(key) => key,
        Err(e) => {
            tracing::warn!("batch {id}: reading its key: {e}");
            return;
        }
    };
    let batch = Arc::new(batch);
    let key = key.map(Arc::new);
    let mut under_way: JoinSet<()> = JoinSet::new();
    let mut stopped = false;
    for item in pending {
        while under_way.len() >= CONCURRENCY {
            under_way.join_next().await;
        }
        if *stop.borrow() {
            stopped = true;
            break;
        }
        match app.store.batch(&id).await {
            Ok(Some(now)) if now.status == BatchStatus::InProgress && now_ms() < now.expires_ms => {
            }
            Ok(_) => break,
            Err(e) => {
                tracing::warn!("batch {id}: reading it: {e}");
                stopped = true;
                break;
            }
        }
        let (app, batch, key, mut stop) = (app.clone(), batch.clone(), key.clone(), stop.clone());
        under_way.spawn(async move {
            tokio::select! {
                () = run_item(&app, &batch, key.as_deref(), item) => {}
                // Dropped: no result, so it runs again after a restart.
                _ = stop.wait_for(|s| *s) => {}
            }
        });
    }
    while under_way.join_next().await.is_some() {}
    if stopped || *stop.borrow() {
        return;
    }
    end_the_rest(app, &id).await;
}

/// The requests of a batch that have no result, in order.
async fn pending_items(app: &App, id: &str) -> Result<Vec<BatchItem>, store::StoreError> {
    let mut out = Vec::new();
    let mut from = 0u32;
    loop {
        let page = app.store.batch_items(id, from, PAGE).await?;
        let Some(last) = page.last().map(|i| i.index) else {
            return Ok(out);
        };
        let full = page.len() == PAGE;
        out.extend(page.into_iter().filter(|i| i.result.is_none()));
        if !full {
            return Ok(out);
        }
        from = last + 1;
    }
}

/// After the last request ran: those without a result (the batch was canceled or expired)
/// end `canceled` or `expired`, which ends the batch.
async fn end_the_rest(app: &App, id: &str) {
    let batch = match app.store.batch(id).await {
        Ok(Some(b)) if b.status != BatchStatus::Ended => b,
        Ok(_) => return,
        Err(e) => {
            tracing::warn!("batch {id}: reading it: {e}");
            return;
        }
    };
    let kind = if batch.status == BatchStatus::Canceling {
        BatchResultKind::Canceled
    } else {
        BatchResultKind::Expired
    };
    let rest = match pending_items(app, id).await {
        Ok(items) => items,
        Err(e) => {
            tracing::warn!("batch {id}: reading its requests: {e}");
            return;
        }
    };
    let results: Vec<BatchResult> = rest
        .iter()
        .filter_map(|item| {
            let result = match kind {
                BatchResultKind::Canceled => json!({"type": "canceled"}),
                _ => json!({"type": "expired"}),
            };
            Some(BatchResult {
                index: item.index,
                outcome: BatchOutcome {
                    kind,
                    result: Params::new(&result).ok()?,
                },
                charge: None,
            })
        })
        .collect();
    for chunk in results.chunks(PAGE) {
        record(app, id, chunk).await;
    }
    if results.is_empty() {
        // Nothing left without a result: the batch ends with an empty step.
        record(app, id, &[]).await;
    }
}

/// Records results, trying again a few times when the store fails; a result left unrecorded
/// runs again after a restart.
async fn record(app: &App, id: &str, results: &[BatchResult]) -> bool {
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=RECORD_ATTEMPTS {
        match app.store.record_batch_results(id, results, now_ms()).await {
            Ok(_) => return true,
            Err(e) if attempt == RECORD_ATTEMPTS => {
                tracing::error!("batch {id}: recording {} results: {e}", results.len());
            }
            Err(e) => {
                tracing::warn!("batch {id}: recording results (attempt {attempt}): {e}");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
    false
}

/// An `errored` result: the error in the shape `/v1/messages` answers it.
fn errored(err: &ApiError, rid: &str) -> (BatchResultKind, Value) {
    (
        BatchResultKind::Errored,
        json!({"type": "errored", "error": err.vendor_body(rid)}),
    )
}

/// Runs one request and records its result with its charge.
async fn run_item(app: &Arc<App>, batch: &Batch, key: Option<&Key>, item: BatchItem) {
    let id = crate::ground::http::new_id("msg");
    let (kind, result, charge, bill) = match call(app, batch, key, &item, &id).await {
        Ok((message, charge, bill)) => (
            BatchResultKind::Succeeded,
            json!({"type": "succeeded", "message": message}),
            charge,
            Some(bill),
        ),
        Err(err) => {
            let (kind, result) = errored(&err, &id);
            (kind, result, None, None)
        }
    };
    let Ok(result) = Params::new(&result) else {
        return;
    };
    let results = [BatchResult {
        index: item.index,
        outcome: BatchOutcome { kind, result },
        charge,
    }];
    record(app, &batch.id, &results).await;
    // The reservation is released once the charge is in the store.
    drop(bill);
}

/// The call of one request: the message and its charge, with the bill holding its
/// reservation; or the error its result carries.
async fn call(
    app: &Arc<App>,
    batch: &Batch,
    key: Option<&Key>,
    item: &BatchItem,
    id: &str,
) -> Result<(Value, Option<Charge>, Bill), ApiError> {
    let key = key.ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "the key is gone"))?;
    let value: Value = serde_json::from_str(item.params.as_str())
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, format!("params: {e}")))?;
    let request = Checked::from(messages::validate(value, Endpoint::Messages)?);
    let channel = crate::formats::batches::channel_for(app, key, &request.summary.model)?;
    let sim = match (&batch.sim, channel.is_simulator()) {
        (Some(text), true) => SimDirectives::parse(text)
            .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "x-relay-sim", e))?,
        _ => SimDirectives::default(),
    };
    let input_estimate = request.summary.input_tokens;
    let max_tokens = request.summary.max_tokens.unwrap_or(0);
    let estimate = cost(app, &request.summary.model, input_estimate, max_tokens);
    let bill = Bill::open(app, key, id, &request.summary.model, estimate).await?;
    let body = Bytes::from(item.params.as_str().to_owned());
    let answer = channel
        .messages(ChatCall {
            id,
            request: &request,
            body: &body,
            version: &batch.version,
            beta: None,
            query: None,
            sim: &sim,
        })
        .await;
    if let Some(stats) = app.channel_stats.get(channel.name()) {
        stats.record(answer.is_ok());
    }
    let (body, usage) = match answer {
        Ok(ChatAnswer::Whole { body, usage }) => (body, usage),
        Ok(ChatAnswer::Stream(_)) => {
            return Err(ApiError::new(
                ErrorCode::UpstreamError,
                "the upstream streamed a batch request's answer",
            ));
        }
        Err(failure) => {
            tracing::warn!(
                "batch {} request {}: {}",
                batch.id,
                item.index,
                failure.detail
            );
            let code = match failure.kind {
                FailureKind::RateLimited => ErrorCode::RateLimited,
                FailureKind::Overloaded => ErrorCode::Overloaded,
                FailureKind::Error => ErrorCode::UpstreamError,
            };
            return Err(ApiError::new(code, code.message()));
        }
    };
    let message: Value = serde_json::from_slice(&body)
        .map_err(|_| ApiError::new(ErrorCode::UpstreamError, "upstream error"))?;
    let usage = usage.unwrap_or(Usage {
        input_tokens: input_estimate,
        output_tokens: max_tokens,
        ..Usage::default()
    });
    let amount = cost(
        app,
        &request.summary.model,
        usage.all_input(),
        usage.output_tokens,
    );
    app.metrics.chat(
        &request.summary.model,
        usage.all_input(),
        usage.output_tokens,
        amount.unsigned_abs(),
    );
    let charge = (amount > 0).then(|| Charge {
        key_id: key.id.clone(),
        task_id: id.to_owned(),
        amount,
    });
    Ok((message, charge, bill))
}
