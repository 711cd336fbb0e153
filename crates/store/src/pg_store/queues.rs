//! What waits in the store's queues of writes that share a commit: a task creation for the
//! committer ([`super::group`]) and a transition's write for the writer ([`super::moves`]),
//! and the task row both carry. Kept apart from the two so that the store's connection pool
//! can hold their senders without reaching the code that drains them.

use tokio::sync::{mpsc, oneshot};

use crate::{IdemAnswer, IdemTicket, LedgerDraft, StoreError, Task};

/// A task as its row holds it: the record without `params` (jsonb) and `params` as written.
pub(super) struct TaskRow {
    pub(super) rest: serde_json::Value,
    pub(super) params: String,
}

/// A creation waiting for its group's commit.
pub(super) struct Creation {
    pub(super) task: Task,
    pub(super) row: TaskRow,
    pub(super) ledger: Vec<LedgerDraft>,
    pub(super) idem: Option<(IdemTicket, IdemAnswer)>,
    /// The time of its ledger entries.
    pub(super) at: u64,
    pub(super) done: oneshot::Sender<Result<(), StoreError>>,
}

/// Where a store's creations go to be committed in groups.
pub(super) type Committer = mpsc::UnboundedSender<Creation>;

/// A task's row as a transition writes it, if it is still at `version`.
pub(super) struct Move {
    pub(super) id: String,
    pub(super) status: &'static str,
    pub(super) model: String,
    pub(super) due_ms: Option<i64>,
    pub(super) params: String,
    pub(super) record: serde_json::Value,
    /// The row's `xmin` when the step read it.
    pub(super) version: String,
    /// The row's new version when it was written (it was still at `version`), else `None`.
    pub(super) done: oneshot::Sender<Result<Option<String>, crate::StoreError>>,
}

/// Where a store's transition writes go to be committed in groups.
pub(super) type Mover = mpsc::UnboundedSender<Move>;
