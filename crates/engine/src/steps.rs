//! The store steps of a task's life and money, shared by the engine and the request handlers:
//! the pre-deduction that comes with a new task, the settlement of one that ends with its
//! result, the refund of one that ends without, failing a task. Every status change goes
//! through `Store::transition`.

use store::{LedgerDraft, LedgerKind, Store, StoreError, Task, TaskError, TaskStatus};

use crate::clock::now_secs;

/// The ledger draft of a new task's pre-deduction.
pub fn prededuct(task: &Task) -> Vec<LedgerDraft> {
    draft(task, LedgerKind::Prededuct, -task.price)
}

/// The settlement that ends a task with its result, charged its whole pre-deduction.
pub fn settle(task: &Task) -> Vec<LedgerDraft> {
    settle_at(task, task.price)
}

/// The settlement that ends a task with its result, charged `charged` credits: the entry
/// returns what the pre-deduction took beyond that (a charge above the pre-deduction, or
/// below zero, is taken as the nearest bound).
pub fn settle_at(task: &Task, charged: i64) -> Vec<LedgerDraft> {
    let charged = charged.clamp(0, task.price.max(0));
    draft(task, LedgerKind::Settle, task.price - charged)
}

/// The refund that ends a task without a result.
pub fn refund(task: &Task) -> Vec<LedgerDraft> {
    draft(task, LedgerKind::Refund, task.price)
}

/// One entry of `kind` for a task with a price; none for a free task.
fn draft(task: &Task, kind: LedgerKind, amount: i64) -> Vec<LedgerDraft> {
    if task.price <= 0 {
        return Vec::new();
    }
    vec![LedgerDraft {
        key_id: task.owner.clone(),
        task_id: task.id.clone(),
        kind,
        amount,
    }]
}

/// Moves an unfinished task to `failed` with `error`, refunding it. `None` when another
/// writer ended it first.
pub async fn fail(
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
    let result = store
        .transition(
            &task.id,
            &[TaskStatus::Queued, TaskStatus::Running],
            TaskStatus::Failed,
            &|t| {
                t.error = Some(error.clone());
                t.updated_at = now;
                t.completed_at = Some(now);
            },
            &refund(task),
        )
        .await;
    match result {
        Ok(task) => Ok(Some(task)),
        Err(StoreError::WrongStatus { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Moves an unfinished task to `cancelled`, refunding it.
pub async fn cancel(store: &dyn Store, task: &Task) -> Result<Task, StoreError> {
    let now = now_secs();
    store
        .transition(
            &task.id,
            &[TaskStatus::Queued, TaskStatus::Running],
            TaskStatus::Cancelled,
            &|t| {
                t.updated_at = now;
                t.completed_at = Some(now);
            },
            &refund(task),
        )
        .await
}
