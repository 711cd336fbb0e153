//! The relay's durable state.
//!
//! [`Store`] offers whole business steps (create a task with its pre-deduction, move a task
//! from one status to another with its ledger entries), never get-then-put sequences, so that
//! another backend can implement each step as one transaction. [`SledStore`] is the embedded
//! default. Blobs (videos, images) live in a [`BlobStore`]; [`LocalBlobs`] is a directory.
//!
//! Nothing outside this crate names sled.
#![forbid(unsafe_code)]

mod blobs;
mod model;
mod sled_store;
#[cfg(test)]
mod test_util;

pub use blobs::{BlobStore, LocalBlobs};
pub use model::*;
pub use sled_store::SledStore;

/// Failure of a store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store: {0}")]
    Backend(String),
    #[error("store: corrupt record in {tree}: {source}")]
    Corrupt {
        tree: &'static str,
        source: serde_json::Error,
    },
    #[error("insufficient quota on key {key_id}: {needed} needed, {remaining} remaining")]
    InsufficientQuota {
        key_id: String,
        needed: i64,
        remaining: i64,
    },
    #[error("key {0} not found")]
    KeyNotFound(String),
    #[error("task {0} not found")]
    TaskNotFound(String),
    #[error("task {task_id}: status is {actual:?}, not one of {expected:?}")]
    WrongStatus {
        task_id: String,
        expected: Vec<TaskStatus>,
        actual: TaskStatus,
    },
    #[error("ledger entry {kind:?} for task {task_id} already exists")]
    DuplicateLedger { task_id: String, kind: LedgerKind },
    #[error("key hash already in use")]
    DuplicateKey,
}

/// The business steps of the relay's state.
///
/// Every mutating call is atomic; calls that acknowledge something to a client
/// (`create_task`, `transition`, key changes) are durable (flushed) when they return.
pub trait Store: Send + Sync + 'static {
    /// Writes a new task, its owner and due-time index entries and its ledger entries (the
    /// pre-deduction) in one transaction, then flushes. A ledger entry that the key's quota
    /// cannot cover fails the whole step with [`StoreError::InsufficientQuota`] and writes nothing.
    fn create_task(&self, task: &Task, ledger: &[LedgerDraft]) -> Result<(), StoreError>;

    fn task(&self, id: &str) -> Result<Option<Task>, StoreError>;

    /// Tasks of one owner (and kind), by creation time, with an exclusive `after` cursor.
    fn list_tasks(&self, query: &TaskQuery) -> Result<Page<Task>, StoreError>;

    /// All tasks, for operators (admin listing); filters applied by the caller.
    fn all_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError>;

    /// Compare-and-swap on the status: when the task's status is one of `from`, applies
    /// `update`, sets the status to `to` (clearing `next_poll_ms` when `to` is final), keeps
    /// the due index in step and writes the ledger entries, all in one transaction, flushed.
    /// `from` may contain `to` for an update without a status change (progress), but a task in
    /// a final status is never changed. Returns the task as written.
    ///
    /// `update` may run more than once (a backend may retry the transaction) and runs inside
    /// it: it must only edit the task, never call the store. It cannot change `id`, `owner` or
    /// `kind`, nor lower `progress`.
    fn transition(
        &self,
        id: &str,
        from: &[TaskStatus],
        to: TaskStatus,
        update: &dyn Fn(&mut Task),
        ledger: &[LedgerDraft],
    ) -> Result<Task, StoreError>;

    /// Unfinished tasks whose `next_poll_ms` is at or before `now_ms`, earliest first, read from
    /// the due-time index (not a scan of all tasks).
    fn due_tasks(&self, now_ms: u64, limit: usize) -> Result<Vec<Task>, StoreError>;

    /// Unfinished tasks, earliest due first (used at start-up and for the timeout sweep).
    fn unfinished_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError>;

    /// Removes a task and its index entries (ledger entries stay). Returns what was removed.
    fn delete_task(&self, id: &str) -> Result<Option<Task>, StoreError>;

    /// Writes a new key (and its hash index), flushed.
    fn create_key(&self, key: &Key) -> Result<(), StoreError>;
    fn key(&self, id: &str) -> Result<Option<Key>, StoreError>;
    /// Looks a key up by the hex SHA-256 of its secret.
    fn key_by_hash(&self, hash: &str) -> Result<Option<Key>, StoreError>;
    fn keys(&self) -> Result<Vec<Key>, StoreError>;
    fn key_count(&self) -> Result<usize, StoreError>;
    /// Applies `update` to a key atomically, flushed, and returns it as written.
    fn update_key(&self, id: &str, update: &dyn Fn(&mut Key)) -> Result<Key, StoreError>;

    /// Writes ledger entries that no task status change causes (a chat request's
    /// pre-deduction and settlement), atomically, flushed. The same rules as for any entry hold:
    /// `(task_id, kind)` is unique and a debit the quota cannot cover fails the whole step.
    fn record_ledger(&self, ledger: &[LedgerDraft]) -> Result<(), StoreError>;

    /// A key's ledger, oldest first.
    fn ledger(&self, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;

    /// Small named values (admin token hash, signing secret).
    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Stores `value` under `name` unless one is there; returns the value now stored.
    fn meta_init(&self, name: &str, value: &[u8]) -> Result<Vec<u8>, StoreError>;

    /// Makes everything written so far durable.
    fn flush(&self) -> Result<(), StoreError>;
}
