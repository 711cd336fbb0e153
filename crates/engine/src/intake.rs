//! What request handlers hand the engine: new tasks, and cancels.

use std::sync::Arc;

use store::{IdemAnswer, IdemTicket, StoreError, Task, TaskStatus};

use crate::calls::cancel_upstream;
use crate::state::Engine;
use crate::steps::{self, prededuct};

impl Engine {
    /// A task this instance moved to its final status: its duration and the ledger entry that
    /// came with the move, counted for the metrics.
    pub(crate) fn finished(&self, task: &Task) {
        self.metrics.finished(task);
        let entries = match task.status {
            TaskStatus::Succeeded => steps::settle(task),
            _ => steps::refund(task),
        };
        self.metrics.ledger(&entries);
    }

    /// Stores a new task with its pre-deduction, durably, and wakes the engine to submit it.
    pub async fn enqueue(&self, task: &Task) -> Result<(), StoreError> {
        let ledger = prededuct(task);
        self.store.create_task(task, &ledger).await?;
        self.metrics.ledger(&ledger);
        self.wake();
        Ok(())
    }

    /// [`Engine::enqueue`] for a request with an `Idempotency-Key`: the key's record (claimed
    /// by `ticket`) is completed with `answer` in the same store step as the task.
    pub async fn enqueue_idempotent(
        &self,
        task: &Task,
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        let ledger = prededuct(task);
        self.store
            .create_task_idempotent(task, &ledger, ticket, answer)
            .await?;
        self.metrics.ledger(&ledger);
        self.wake();
        Ok(())
    }

    /// Cancels a task that has not ended, refunding its pre-deduction, and asks its upstream
    /// (if one accepted it) to stop. `StoreError::WrongStatus` when it had ended already.
    pub async fn cancel(self: &Arc<Self>, task: &Task) -> Result<Task, StoreError> {
        let cancelled = steps::cancel(&*self.store, task).await?;
        self.finished(&cancelled);
        if let (Some(channel), Some(upstream_id)) = (
            cancelled
                .channel
                .as_deref()
                .and_then(|c| self.channel_named(c)),
            cancelled.upstream_id.clone(),
        ) {
            cancel_upstream(self, channel.clone(), upstream_id);
        }
        Ok(cancelled)
    }
}
