//! Task operations shared by both formats: create with its pre-deduction, look up by owner,
//! cancel with its refund, delete. Every status change goes through `Store::transition`.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use http::HeaderValue;
use store::{
    Key, LedgerDraft, LedgerKind, Store, StoreError, Task, TaskError, TaskKind, TaskStatus,
};

use crate::app::{App, now_secs};
use crate::http::Answer;

/// Longest task id accepted in a path; longer ones are simply not found.
pub const MAX_ID_LEN: usize = 64;

pub fn store_unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::error!("store: {e}");
    ApiError::new(
        ErrorCode::Unavailable,
        "the task store is not available now",
    )
}

/// Runs a store step off the async workers (store steps may flush to disk).
pub async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    step: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = app.store.clone();
    tokio::task::spawn_blocking(move || step(&*store))
        .await
        .map_err(|e| StoreError::Backend(format!("store step panicked: {e}")))?
}

/// Stores a new task with its pre-deduction, durably, and wakes the engine.
pub async fn create(app: &Arc<App>, task: &Task, key: &Key, price: i64) -> Result<(), ApiError> {
    let ledger = crate::videos::prededuct(key, &task.id, price);
    let owned = task.clone();
    match blocking(app, move |s| s.create_task(&owned, &ledger)).await {
        Ok(()) => {
            app.engine_wake.notify_one();
            Ok(())
        }
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
pub async fn owned(app: &Arc<App>, key: &Key, id: &str, kind: TaskKind) -> Result<Task, ApiError> {
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("no task {id}"));
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(not_found());
    }
    // A point read served from the store's cache, like the key lookup: no thread hop.
    let task = app
        .store
        .task(id)
        .map_err(store_unavailable)?
        .ok_or_else(not_found)?;
    if task.owner != key.id || task.kind != kind {
        return Err(not_found());
    }
    Ok(task)
}

/// A page of `key`'s tasks of one kind, by the list query both formats take
/// (`limit`, `after`, `order`).
pub async fn list_page(
    app: &Arc<App>,
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
    blocking(app, move |s| s.list_tasks(&q))
        .await
        .map_err(store_unavailable)
}

/// The refund that ends a task without a result.
pub fn refund(task: &Task) -> Vec<LedgerDraft> {
    if task.price <= 0 {
        return Vec::new();
    }
    vec![LedgerDraft {
        key_id: task.owner.clone(),
        task_id: task.id.clone(),
        kind: LedgerKind::Refund,
        amount: task.price,
    }]
}

/// Moves an unfinished task to `failed` with `error`, refunding it. `None` when another
/// writer ended it first.
pub fn fail(
    store: &dyn Store,
    task: &Task,
    code: &str,
    message: &str,
) -> Result<Option<Task>, StoreError> {
    let error = TaskError {
        code: code.to_owned(),
        message: message.to_owned(),
    };
    let now = now_secs();
    let result = store.transition(
        &task.id,
        &[TaskStatus::Queued, TaskStatus::Running],
        TaskStatus::Failed,
        &|t| {
            t.error = Some(error.clone());
            t.updated_at = now;
            t.completed_at = Some(now);
        },
        &refund(task),
    );
    match result {
        Ok(task) => Ok(Some(task)),
        Err(StoreError::WrongStatus { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Cancels a task that has not ended, refunding its pre-deduction.
pub async fn cancel(app: &Arc<App>, key: &Key, id: &str, kind: TaskKind) -> Result<Task, ApiError> {
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
    let ledger = refund(&task);
    let owned_id = task.id.clone();
    let result = blocking(app, move |s| {
        let now = now_secs();
        s.transition(
            &owned_id,
            &[TaskStatus::Queued, TaskStatus::Running],
            TaskStatus::Cancelled,
            &|t| {
                t.updated_at = now;
                t.completed_at = Some(now);
            },
            &ledger,
        )
    })
    .await;
    match result {
        Ok(cancelled) => {
            if let (Some(channel), Some(upstream_id)) = (
                cancelled
                    .channel
                    .as_deref()
                    .and_then(|c| app.video_channel_named(c)),
                cancelled.upstream_id.clone(),
            ) {
                crate::engine::cancel_upstream(app, channel.clone(), upstream_id);
            }
            Ok(cancelled)
        }
        Err(StoreError::WrongStatus { actual, .. }) => Err(not_cancellable(actual)),
        Err(e) => Err(store_unavailable(e)),
    }
}

/// Deletes a task and its files, cancelling it first when it is still running.
pub async fn delete(app: &Arc<App>, key: &Key, id: &str, kind: TaskKind) -> Result<(), ApiError> {
    let task = owned(app, key, id, kind).await?;
    if !task.status.is_final() {
        match cancel(app, key, id, kind).await {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::TaskNotCancellable => {}
            Err(e) => return Err(e),
        }
    }
    let owned_id = task.id.clone();
    blocking(app, move |s| s.delete_task(&owned_id))
        .await
        .map_err(store_unavailable)?;
    let blobs = app.blobs.clone();
    let prefix = task.id.clone();
    let _ = tokio::task::spawn_blocking(move || blobs.delete_prefix(&prefix)).await;
    Ok(())
}

/// `openai-poll-after-ms` on an unfinished task (CONTRACT §0.1a).
pub fn poll_after_header(task: &Task, res: &mut Answer) {
    if !task.status.is_final() {
        res.headers_mut()
            .insert("openai-poll-after-ms", HeaderValue::from_static("5000"));
    }
}
