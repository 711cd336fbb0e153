//! The handler path both task formats share: create (handing the task to the engine with its
//! pre-deduction), look up by owner, list, get, cancel (with its refund), delete. A format says
//! what it is through [`TaskFormat`]: its kind of task and how its records look.

use std::sync::Arc;

use bytes::Bytes;
use channels::{Demand, DemandField, Refusal, SimDirectives};
use engine::now_ms;
use error_codes::{ApiError, ErrorCode};
use http::{HeaderName, HeaderValue};
use serde::Serialize;
use store::{Key, Outputs, StoreError, Task, TaskKind, TaskStatus};

use crate::app::App;
use crate::formats::idempotency::Idem;
use crate::ground::auth::may_use_model;
use crate::ground::http::{Answer, MAX_ID_LEN, error, json_text, ok, store_unavailable};

/// A task format as the shared handlers see it.
pub trait TaskFormat {
    /// The kind of task the format's routes see (another format's tasks are not found).
    const KIND: TaskKind;
    /// The task record as clients see it.
    type Record: Serialize;
    /// A page of records.
    type List: Serialize;

    /// The record is a function of the task alone (no clock, no signed URL): a poll may serve
    /// it as last rendered while the task is unchanged ([`crate::ground::record_cache`]).
    const STABLE: bool;

    fn record(app: &App, task: &Task) -> Result<Self::Record, ApiError>;
    fn list(data: Vec<Self::Record>, has_more: bool) -> Self::List;
}

/// A stored task whose params cannot be read back (`engine::formats::UNREADABLE`).
pub fn unreadable(message: &'static str) -> ApiError {
    ApiError::new(ErrorCode::Unavailable, message)
}

/// The format's record of `task` as an answer.
pub fn answer<F: TaskFormat>(app: &App, task: &Task) -> Answer {
    match F::record(app, task) {
        Ok(record) => ok(&record),
        Err(e) => error(&e),
    }
}

/// The record of `task` as last rendered while the task is unchanged, else rendered now.
fn kept_answer<F: TaskFormat>(app: &App, task: &Arc<Task>) -> Answer {
    if let Some(body) = app.records.get(task) {
        return json_text(body);
    }
    let record = match F::record(app, task) {
        Ok(record) => record,
        Err(e) => return error(&e),
    };
    let Ok(bytes) = serde_json::to_vec(&record) else {
        // The shared path logs the failure and answers it.
        return ok(&record);
    };
    let body = Bytes::from(bytes);
    app.records.put(task, body.clone());
    json_text(body)
}

/// `create`'s answer: the new task's record (with `openai-poll-after-ms`: it has not ended), or
/// the error.
pub fn created<F: TaskFormat>(app: &App, result: Result<Task, ApiError>) -> Answer {
    match result {
        Ok(task) => {
            let mut res = answer::<F>(app, &task);
            poll_after_header(&task, &mut res);
            res
        }
        Err(e) => error(&e),
    }
}

/// `invalid model` unless `key` may use `model`.
pub fn may_use(key: &Key, model: &str) -> Result<(), ApiError> {
    if may_use_model(key, model) {
        return Ok(());
    }
    Err(ApiError::field(
        ErrorCode::InvalidModel,
        "model",
        format!("this key may not use model {model}"),
    ))
}

/// `unavailable` unless a channel serves `model`.
pub fn served(app: &App, model: &str) -> Result<(), ApiError> {
    match app.engine.channel_for(model) {
        Some(_) => Ok(()),
        None => Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("no channel serves model {model} now"),
        )),
    }
}

/// Refuses a request that no channel of `model` can make, before anything is charged or
/// stored: the field's own error with a detail naming what the channels can do instead (a
/// channel without a catalog entry for its model makes anything the validators accept).
/// No channel at all is [`served`]'s concern.
pub fn fits(app: &App, kind: TaskKind, model: &str, demand: &Demand) -> Result<(), ApiError> {
    if app.engine.channel_for(model).is_none() {
        return Ok(());
    }
    match app.engine.fit(model, demand) {
        Ok(_) => Ok(()),
        Err(refusal) => Err(refused(kind, refusal)),
    }
}

/// The error of a field no channel can serve, as the format names the field.
fn refused(kind: TaskKind, refusal: Refusal) -> ApiError {
    use DemandField as F;
    let first = kind == TaskKind::Video;
    let (code, param) = match refusal.field {
        F::Resolution if first => (ErrorCode::InvalidSize, "size"),
        F::Resolution => (ErrorCode::InvalidResolution, "resolution"),
        F::Duration => (ErrorCode::InvalidDuration, "duration"),
        F::Ratio if first => (ErrorCode::InvalidRatio, "aspect_ratio"),
        F::Ratio => (ErrorCode::InvalidRatio, "ratio"),
        F::FirstFrame if first => (ErrorCode::ReferenceLimitExceeded, "first_frame"),
        F::LastFrame if first => (ErrorCode::ReferenceLimitExceeded, "last_frame"),
        F::ReferenceVideos if first => (ErrorCode::ReferenceLimitExceeded, "reference_video"),
        F::ReferenceAudios if first => (ErrorCode::ReferenceLimitExceeded, "audio_url"),
        F::FirstFrame
        | F::LastFrame
        | F::ReferenceImages
        | F::ReferenceVideos
        | F::ReferenceAudios => (ErrorCode::ReferenceLimitExceeded, "assets"),
    };
    ApiError::field(code, param, refusal.detail)
}

/// What a format gives for a new task.
pub struct Draft<'a, P> {
    pub id: String,
    pub model: &'a str,
    /// The format's params (`engine::formats`).
    pub params: &'a P,
    pub sim: &'a SimDirectives,
    pub warnings: Vec<String>,
    pub price: i64,
    /// The request's `callback_url` (checked); the key's `webhook_url` stands in without one.
    pub callback_url: Option<String>,
}

/// A new `queued` task of format `F` owned by `key`, due now, with the configured deadline and
/// the request's `callback_url` or the key's `webhook_url`.
pub fn new_task<F: TaskFormat, P: Serialize>(
    app: &App,
    key: &Key,
    draft: Draft<'_, P>,
) -> Result<Task, ApiError> {
    let now = now_ms();
    let params = store::Params::new(draft.params)
        .map_err(|e| ApiError::new(ErrorCode::Unavailable, format!("task params: {e}")))?;
    let sim = draft.sim;
    Ok(Task {
        id: draft.id,
        kind: F::KIND,
        owner: key.id.clone(),
        model: draft.model.to_owned(),
        status: TaskStatus::Queued,
        progress: 0,
        created_at: now / 1000,
        updated_at: now / 1000,
        completed_at: None,
        expires_at: None,
        deadline_ms: now + app.config.tasks.timeout_secs * 1000,
        next_poll_ms: Some(now),
        params,
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        polled_ms: None,
        attempts: 0,
        sim: (!sim.is_empty()).then(|| serde_json::to_string(sim).unwrap_or_default()),
        outputs: Outputs::default(),
        error: None,
        warnings: draft.warnings,
        price: draft.price,
        callback_url: draft.callback_url.or_else(|| key.webhook_url.clone()),
    })
}

/// Stores a new task with its pre-deduction, durably, and wakes the engine. With a claimed
/// `Idempotency-Key`, the format's answer for the task is kept with the key in the same store
/// step, so a retry answers this task whatever stops the process afterwards.
pub async fn create<F: TaskFormat>(
    app: &App,
    task: &Task,
    idem: &mut Idem,
) -> Result<(), ApiError> {
    let stored = match idem.claimed_ticket() {
        Some(ticket) => {
            let answer = crate::formats::idempotency::task_answer(&F::record(app, task)?)?;
            app.engine.enqueue_idempotent(task, ticket, &answer).await
        }
        None => app.engine.enqueue(task).await,
    };
    match stored {
        Ok(()) => {
            idem.kept();
            Ok(())
        }
        Err(StoreError::IdempotencyLost(_)) => Err(crate::formats::idempotency::conflict(
            "was taken over by a later request while this one was handled",
        )),
        Err(StoreError::InsufficientQuota {
            needed, remaining, ..
        }) => Err(ApiError::new(
            ErrorCode::InsufficientQuota,
            format!("this task costs {needed} credits; the key has {remaining} left"),
        )),
        Err(e) => Err(store_unavailable(e)),
    }
}

/// The task `id` of kind `kind` when `key`'s owner owns it; otherwise `404 not found` (never
/// telling whether it exists).
pub async fn owned(app: &App, key: &Key, id: &str, kind: TaskKind) -> Result<Task, ApiError> {
    owned_shared(app, key, id, kind)
        .await
        .map(Arc::unwrap_or_clone)
}

/// [`owned`] for a reader that only looks: the store's own decoded task, shared, not copied.
async fn owned_shared(
    app: &App,
    key: &Key,
    id: &str,
    kind: TaskKind,
) -> Result<Arc<Task>, ApiError> {
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("no task {id}"));
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(not_found());
    }
    // A point read served from the store's cache, like the key lookup: no thread hop.
    let task = app
        .store
        .task_shared(id)
        .await
        .map_err(store_unavailable)?
        .ok_or_else(not_found)?;
    if task.owner != key.id || task.kind != kind {
        return Err(not_found());
    }
    Ok(task)
}

/// `GET` of one task: its record, with `openai-poll-after-ms` while it runs.
pub async fn get<F: TaskFormat>(app: &App, key: &Key, id: &str) -> Answer {
    match owned_shared(app, key, id, F::KIND).await {
        Ok(task) => {
            let mut res = if F::STABLE {
                kept_answer::<F>(app, &task)
            } else {
                answer::<F>(app, &task)
            };
            poll_after_header(&task, &mut res);
            res
        }
        Err(e) => error(&e),
    }
}

/// `GET` of a page of `key`'s tasks of the format, by the list query both formats take
/// (`limit`, `after`, `order`).
pub async fn list<F: TaskFormat>(app: &App, key: &Key, query: Option<&str>) -> Answer {
    let page = match list_page(app, key, F::KIND, query).await {
        Ok(page) => page,
        Err(e) => return error(&e),
    };
    let mut data = Vec::with_capacity(page.items.len());
    for task in &page.items {
        match F::record(app, task) {
            Ok(r) => data.push(r),
            Err(e) => return error(&e),
        }
    }
    ok(&F::list(data, page.has_more))
}

async fn list_page(
    app: &App,
    key: &Key,
    kind: TaskKind,
    query: Option<&str>,
) -> Result<store::Page<Task>, ApiError> {
    let params = videos_v1::parse_list_query(query)?;
    let q = store::TaskQuery {
        owner: key.id.clone(),
        kind: Some(kind),
        after: params.after,
        limit: params.limit,
        order: match params.order {
            videos_v1::ListOrder::Asc => store::Order::Asc,
            videos_v1::ListOrder::Desc => store::Order::Desc,
        },
    };
    app.store.list_tasks(&q).await.map_err(store_unavailable)
}

/// `POST .../cancel`: the cancelled task's record.
pub async fn cancel<F: TaskFormat>(app: &Arc<App>, key: &Key, id: &str) -> Answer {
    match cancel_owned(app, key, id, F::KIND).await {
        Ok(task) => answer::<F>(app, &task),
        Err(e) => error(&e),
    }
}

/// Cancels a task that has not ended, refunding its pre-deduction.
async fn cancel_owned(
    app: &Arc<App>,
    key: &Key,
    id: &str,
    kind: TaskKind,
) -> Result<Task, ApiError> {
    let task = owned(app, key, id, kind).await?;
    let not_cancellable = |status: TaskStatus| {
        ApiError::new(
            ErrorCode::TaskNotCancellable,
            format!("task {id} has already ended ({status:?})").to_lowercase(),
        )
    };
    if task.status.is_final() {
        return Err(not_cancellable(task.status));
    }
    match app.engine.cancel(&task).await {
        Ok(cancelled) => Ok(cancelled),
        Err(StoreError::WrongStatus { actual, .. }) => Err(not_cancellable(actual)),
        Err(e) => Err(store_unavailable(e)),
    }
}

/// Deletes a task and its files, cancelling it first when it is still running.
pub async fn delete(app: &Arc<App>, key: &Key, id: &str, kind: TaskKind) -> Result<(), ApiError> {
    let task = owned(app, key, id, kind).await?;
    if !task.status.is_final() {
        match cancel_owned(app, key, id, kind).await {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::TaskNotCancellable => {}
            Err(e) => return Err(e),
        }
    }
    app.store
        .delete_task(&task.id)
        .await
        .map_err(store_unavailable)?;
    if let Err(e) = app.blobs.delete_prefix(&task.id).await {
        tracing::warn!("removing the files of task {}: {e}", task.id);
    }
    Ok(())
}

const POLL_AFTER: HeaderName = HeaderName::from_static("openai-poll-after-ms");

/// `openai-poll-after-ms` on a successful answer about an unfinished task (CONTRACT §0.1a).
pub fn poll_after_header(task: &Task, res: &mut Answer) {
    if !task.status.is_final() && res.status().is_success() {
        res.headers_mut()
            .insert(POLL_AFTER, HeaderValue::from_static("5000"));
    }
}
