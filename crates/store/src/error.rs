//! Why a store step failed.

use crate::model::{AssetStatus, LedgerKind, TaskStatus};

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
    /// A step after an idempotency claim found the key no longer held by its ticket (taken
    /// over after [`crate::IDEMPOTENCY_PENDING_MS`], or completed).
    #[error("idempotency key {0:?} is no longer held by this request")]
    IdempotencyLost(String),
    #[error("key hash already in use")]
    DuplicateKey,
    /// The database was migrated by a newer build than this one.
    #[error(
        "store schema is at version {found}, newer than the {known} this build knows: run a relay at least as new as the one that migrated it"
    )]
    SchemaTooNew { found: i32, known: i32 },
    #[error("webhook {0} not found")]
    WebhookNotFound(String),
    #[error("asset library {0} not found")]
    LibraryNotFound(String),
    #[error("asset {0} not found")]
    AssetNotFound(String),
    #[error("message batch {0} not found")]
    BatchNotFound(String),
    /// A new character would take its owner past the most characters one owner may have.
    #[error("key {owner} has {max} characters, the most it may have")]
    CharacterLimit { owner: String, max: u64 },
    #[error(
        "asset {asset_id}: status is {actual:?}, cannot move to {to:?} (expected one of {expected:?})"
    )]
    AssetWrongStatus {
        asset_id: String,
        expected: Vec<AssetStatus>,
        to: AssetStatus,
        actual: AssetStatus,
    },
}
