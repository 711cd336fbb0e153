//! The `Store` trait: the business steps of the relay's state, each one transaction.

use std::sync::Arc;

use crate::batch::{Batch, BatchItem, BatchResult};
use crate::error::StoreError;
use crate::idempotency::{IdemAnswer, IdemClaim, IdemTicket};
use crate::model::{
    AdminTaskQuery, AssetQuery, AssetRecord, AssetStatus, Character, Charge, Claim, DueWebhook,
    Key, LedgerDraft, LedgerEntry, Library, Order, Page, Task, TaskCount, TaskQuery, TaskStatus,
    Webhook, WebhookAttempt, WebhookOutcome, WebhookPick, WebhookPicker, WebhookQuery,
};

/// An edit of a task inside a [`Store::transition`].
pub type TaskUpdate<'a> = &'a (dyn Fn(&mut Task) + Send + Sync);
/// An edit of a key inside a [`Store::update_key`].
pub type KeyUpdate<'a> = &'a (dyn Fn(&mut Key) + Send + Sync);
/// An edit of an asset inside a [`Store::transition_asset`].
pub type AssetUpdate<'a> = &'a (dyn Fn(&mut AssetRecord) + Send + Sync);

/// The business steps of the relay's state.
///
/// Every mutating call is atomic; calls that acknowledge something to a client
/// (`create_task`, `transition`, key changes) are durable (flushed) when they return; callers
/// flushing at the same moment share one flush (group commit). A chat message's charge is the
/// exception, described at [`Store::charges`].
///
/// The steps are async: a backend may wait on the network (a database server) or on a disk
/// sync, never blocking the caller's thread. Several processes may share one backend (the
/// engine's work is handed out by [`Store::claim_due`]); the embedded one is one process's.
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// Whether other relays may share this store and claim its tasks (PostgreSQL), or it is
    /// this process's alone (the embedded store: whatever a claim of it holds after a restart
    /// was held by a process that is gone).
    fn shared(&self) -> bool {
        false
    }

    /// Writes a new task, its owner and due-time index entries and its ledger entries (the
    /// pre-deduction) in one transaction, then flushes. A ledger entry that the key's quota
    /// cannot cover fails the whole step with [`StoreError::InsufficientQuota`] and writes nothing.
    async fn create_task(&self, task: &Task, ledger: &[LedgerDraft]) -> Result<(), StoreError>;

    async fn task(&self, id: &str) -> Result<Option<Task>, StoreError>;

    /// [`Store::task`] for a reader that only looks: a backend that keeps the tasks it read
    /// lately decoded hands out the one it keeps, unchanged, instead of a copy.
    async fn task_shared(&self, id: &str) -> Result<Option<Arc<Task>>, StoreError> {
        Ok(self.task(id).await?.map(Arc::new))
    }

    /// [`Store::create_task`] for a request with an `Idempotency-Key`: in the same transaction
    /// the key's record (claimed by `ticket`) is completed with `answer`, so the task and the
    /// answer that names it are written together or not at all. A record no longer held by
    /// `ticket` fails the step with [`StoreError::IdempotencyLost`] and writes nothing.
    async fn create_task_idempotent(
        &self,
        task: &Task,
        ledger: &[LedgerDraft],
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError>;

    /// Claims `ticket`'s key for a request with `fingerprint`, in one transaction: with no live record under the key (none, one older than
    /// [`crate::IDEMPOTENCY_TTL_MS`], or one still pending after
    /// [`crate::IDEMPOTENCY_PENDING_MS`]), writes a pending record held by the ticket
    /// ([`IdemClaim::Claimed`]); otherwise tells what is there. Not flushed: a claim lost in a
    /// crash leaves the key free, and whatever durable step follows it takes it to disk too.
    async fn claim_idempotency(
        &self,
        ticket: &IdemTicket,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<IdemClaim, StoreError>;

    /// Ends `ticket`'s claim, flushed: with an answer, completes the record with it; without,
    /// removes the record (the request may run again). A record no longer held by `ticket` is
    /// left as it is ([`StoreError::IdempotencyLost`]).
    async fn finish_idempotency(
        &self,
        ticket: &IdemTicket,
        answer: Option<&IdemAnswer>,
    ) -> Result<(), StoreError>;

    /// Removes up to `limit` records claimed before `before_ms`, oldest first (from an index,
    /// not a scan of all records). Returns how many were removed.
    async fn sweep_idempotency(&self, before_ms: u64, limit: usize) -> Result<usize, StoreError>;

    /// Tasks of one owner (and kind), by creation time, with an exclusive `after` cursor.
    async fn list_tasks(&self, query: &TaskQuery) -> Result<Page<Task>, StoreError>;

    /// Tasks of every owner, for operators, newest first, filtered and paged by the store.
    async fn admin_tasks(&self, query: &AdminTaskQuery) -> Result<Page<Task>, StoreError>;

    /// Compare-and-swap on the status: when the task's status is one of `from`, applies
    /// `update`, sets the status to `to` (clearing `next_poll_ms` when `to` is final), keeps
    /// the due index in step and writes the ledger entries, all in one transaction, flushed.
    /// `from` may contain `to` for an update without a status change (progress), but a task in
    /// a final status is never changed. Returns the task as written.
    ///
    /// A move to a final status of a task with a `callback_url` also writes its [`Webhook`]
    /// (`pending`, due at once, carrying the task as written) in the same transaction, so a
    /// task's end is never without its webhook, whatever stops the process afterwards.
    ///
    /// `update` may run more than once (a backend may retry the transaction) and runs inside
    /// it: it must only edit the task, never call the store. It cannot change `id`, `owner` or
    /// `kind`, nor lower `progress`.
    async fn transition(
        &self,
        id: &str,
        from: &[TaskStatus],
        to: TaskStatus,
        update: TaskUpdate<'_>,
        ledger: &[LedgerDraft],
    ) -> Result<Task, StoreError>;

    /// Claims due work: unfinished tasks whose `next_poll_ms` is at or before `now_ms`, earliest
    /// first, read from the due-time index (not a scan of all tasks). In the same transaction
    /// each claimed task's `next_poll_ms` moves to `now_ms + lease_ms` (its lease), so no other
    /// caller, in this process or another sharing the backend, is handed it again until the
    /// lease runs out (its holder died) or the holder's next step sets the task's own time.
    /// Tasks another caller is claiming at the same moment are skipped, not waited for.
    /// Returns the tasks as claimed, each with the due time it had. Not flushed: a claim lost in
    /// a crash leaves the task due.
    async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError>;

    /// How many tasks there are of each kind in each status (pairs with none left out), for
    /// the metrics. Cheap: counted by the backend, not by reading every task.
    async fn task_counts(&self) -> Result<Vec<TaskCount>, StoreError>;

    /// Claims due webhook deliveries that `pick` chooses. Looks at up to `scan` `pending`
    /// webhooks whose `next_attempt_ms` is at or before `now_ms`, earliest first, from an index
    /// that holds each one's owner and URL (the whole record is read only for those taken),
    /// and asks `pick` about each in turn ([`WebhookPick`]). In one transaction: a taken one's
    /// `next_attempt_ms` moves to `now_ms + lease_ms`, as [`Store::claim_due`] leases tasks, so
    /// no other caller gets it until the lease runs out or its attempt is recorded; a deferred
    /// one's moves to the time `pick` gave; a skipped one stays due. One that another caller
    /// moved meanwhile is left alone. Returns the taken ones, earliest due first. Not flushed.
    ///
    /// `pick` runs once per webhook looked at, so it may count what it took.
    async fn pick_webhooks(
        &self,
        now_ms: u64,
        lease_ms: u64,
        scan: usize,
        pick: WebhookPicker<'_>,
    ) -> Result<Vec<Webhook>, StoreError>;

    /// [`Store::pick_webhooks`] taking the earliest `limit` due webhooks, whatever their
    /// receivers.
    async fn claim_webhooks(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> Result<Vec<Webhook>, StoreError> {
        let mut left = limit;
        let mut first = move |_: &DueWebhook<'_>| {
            if left == 0 {
                return WebhookPick::Stop;
            }
            left -= 1;
            WebhookPick::Take
        };
        self.pick_webhooks(now_ms, lease_ms, limit, &mut first)
            .await
    }

    /// Appends `attempt` to webhook `id` and applies `outcome` (delivered, due again at a time,
    /// or failed), in one transaction, flushed. A webhook already delivered or failed keeps its
    /// status (a late attempt of an expired lease is recorded, nothing more). Returns the
    /// webhook as written.
    async fn record_webhook_attempt(
        &self,
        id: &str,
        attempt: &WebhookAttempt,
        outcome: WebhookOutcome,
    ) -> Result<Webhook, StoreError>;

    /// Webhooks for operators, newest first, filtered by task and status and paged.
    async fn webhooks(&self, query: &WebhookQuery) -> Result<Page<Webhook>, StoreError>;

    /// Unfinished tasks, earliest due first (used at start-up and for the timeout sweep).
    async fn unfinished_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError>;

    /// Removes a task and its index entries (ledger entries stay). Returns what was removed.
    async fn delete_task(&self, id: &str) -> Result<Option<Task>, StoreError>;

    /// Writes a new key (and its hash index), flushed.
    async fn create_key(&self, key: &Key) -> Result<(), StoreError>;
    async fn key(&self, id: &str) -> Result<Option<Key>, StoreError>;
    /// Looks a key up by the hex SHA-256 of its secret.
    async fn key_by_hash(&self, hash: &str) -> Result<Option<Key>, StoreError>;
    async fn keys(&self) -> Result<Vec<Key>, StoreError>;
    async fn key_count(&self) -> Result<usize, StoreError>;
    /// Applies `update` to a key atomically, flushed, and returns it as written.
    async fn update_key(&self, id: &str, update: KeyUpdate<'_>) -> Result<Key, StoreError>;

    /// Writes the `charge` entries of work that has no task (chat messages, billed when they
    /// end), all in one transaction: each takes its `amount` credits (`amount` >= 0) from its
    /// key, or what the key has left when that is less. A charge's id (`task_id`) is minted by
    /// the caller for one piece of work (a message's `msg_` id) and given once: a repeated id
    /// within the call, or a charge whose key is unknown, takes nothing and writes nothing; the
    /// store keeps no index per charge to look ids up across calls. Returns the amount each
    /// took, in order.
    ///
    /// Not flushed: a charge lost in a crash costs the operator, never the client, and the next
    /// flush (the store's own, at most a moment later, or any durable step) takes it to disk.
    async fn charges(&self, charges: &[Charge]) -> Result<Vec<i64>, StoreError>;

    /// A key's ledger, oldest first.
    async fn ledger(&self, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;

    /// Small named values (admin token hash, signing secret).
    async fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Stores `value` under `name` unless one is there; returns the value now stored.
    async fn meta_init(&self, name: &str, value: &[u8]) -> Result<Vec<u8>, StoreError>;

    /// Makes everything written so far durable.
    async fn flush(&self) -> Result<(), StoreError>;

    /// Ends this process's use of the store, after its last step: flushed, and what a backend
    /// keeps in memory about the stored data (the embedded one's task counts) left for the
    /// next opening, which otherwise works it out again.
    async fn close(&self) -> Result<(), StoreError> {
        self.flush().await
    }

    /// Writes a new character with its owner index entry and its ledger entries (the charge of
    /// its price, if any) in one transaction, flushed, when its owner has fewer than
    /// `max_per_owner` characters: an owner at that number fails the step with
    /// [`StoreError::CharacterLimit`], a ledger entry the key's quota cannot cover with
    /// [`StoreError::InsufficientQuota`], and either writes nothing. Two creations for one
    /// owner at once are counted one after the other, so the number is never passed. An id in
    /// use is refused ([`StoreError::Backend`]) and the one there is left as it was.
    async fn create_character(
        &self,
        character: &Character,
        max_per_owner: u64,
        ledger: &[LedgerDraft],
    ) -> Result<(), StoreError>;

    async fn character(&self, id: &str) -> Result<Option<Character>, StoreError>;

    /// One owner's characters by creation time, with an exclusive `after` cursor (a character
    /// id), read from the owner index.
    async fn list_characters(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Character>, StoreError>;

    /// Removes character `id` of `owner` and its index entry, freeing its place in the owner's
    /// number, flushed (ledger entries stay). Returns what was removed (whose video blob the
    /// caller deletes); `None` when there is no such character or it is another owner's.
    async fn delete_character(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Character>, StoreError>;

    /// Writes a new, empty asset library and its owner index entry, flushed.
    async fn create_library(&self, library: &Library) -> Result<(), StoreError>;

    async fn library(&self, id: &str) -> Result<Option<Library>, StoreError>;

    /// One owner's libraries by creation time, with an exclusive `after` cursor (a library id).
    async fn list_libraries(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Library>, StoreError>;

    /// Removes a library with all its assets and their index entries in one transaction,
    /// flushed. Returns the library and the assets removed (whose blobs the caller deletes).
    async fn delete_library(
        &self,
        id: &str,
    ) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError>;

    /// Writes a new asset with its index entries and counts it in its library, in one
    /// transaction, flushed. The library must exist and have the asset's owner and family
    /// ([`StoreError::LibraryNotFound`] otherwise).
    async fn create_asset(&self, asset: &AssetRecord) -> Result<(), StoreError>;

    /// [`Store::create_asset`] for an upload with an `Idempotency-Key`: in the same
    /// transaction the key's record (claimed by `ticket`) is completed with `answer`, so the
    /// asset and the answer that names it are written together or not at all. A record no
    /// longer held by `ticket` fails the step with [`StoreError::IdempotencyLost`].
    async fn create_asset_idempotent(
        &self,
        asset: &AssetRecord,
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError>;

    async fn asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError>;

    /// One library's assets by creation time, filtered by status and type, with an exclusive
    /// `after` cursor (an asset id).
    async fn list_assets(&self, query: &AssetQuery) -> Result<Page<AssetRecord>, StoreError>;

    /// Compare-and-swap on an asset's status: when it is one of `from` and `to` is the same
    /// status or an allowed move from it ([`AssetStatus::can_move_to`]), applies `update`, sets
    /// the status to `to` and keeps the processing and expiry indexes in step, in one
    /// transaction, flushed. A final asset never changes. Returns the asset as written.
    ///
    /// `update` may run more than once and must only edit the asset; it cannot change `id`,
    /// `owner`, `library_id`, `family` or `created_at`.
    async fn transition_asset(
        &self,
        id: &str,
        from: &[AssetStatus],
        to: AssetStatus,
        update: AssetUpdate<'_>,
    ) -> Result<AssetRecord, StoreError>;

    /// Active assets whose `expires_at` is at or before `now_secs`, earliest first, read from
    /// the expiry index (not a scan of all assets).
    async fn expired_assets(
        &self,
        now_secs: u64,
        limit: usize,
    ) -> Result<Vec<AssetRecord>, StoreError>;

    /// Assets still `processing` (read from an index), for picking up work after a restart.
    async fn processing_assets(&self, limit: usize) -> Result<Vec<AssetRecord>, StoreError>;

    /// Removes an asset and its index entries and uncounts it from its library, flushed.
    /// Returns what was removed.
    async fn delete_asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError>;

    /// Writes a new message batch with its requests (in `index` order, none with a result) and
    /// its owner index entry, in one transaction, flushed.
    async fn create_batch(&self, batch: &Batch, items: &[BatchItem]) -> Result<(), StoreError>;

    /// [`Store::create_batch`] for a request with an `Idempotency-Key`: in the same
    /// transaction the key's record (claimed by `ticket`) is completed with `answer`. A record
    /// no longer held by `ticket` fails the step with [`StoreError::IdempotencyLost`].
    async fn create_batch_idempotent(
        &self,
        batch: &Batch,
        items: &[BatchItem],
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError>;

    async fn batch(&self, id: &str) -> Result<Option<Batch>, StoreError>;

    /// One owner's batches, newest first: `after` (a batch id) pages to older ones, `before`
    /// to newer ones (the `limit` just newer than it, still newest first).
    async fn list_batches(
        &self,
        owner: &str,
        after: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Page<Batch>, StoreError>;

    /// Up to `limit` requests of a batch from `from` on, by index.
    async fn batch_items(
        &self,
        id: &str,
        from: u32,
        limit: usize,
    ) -> Result<Vec<BatchItem>, StoreError>;

    /// Records results of a batch's requests in one transaction, flushed: each result of a
    /// request that has none yet is written, counted, and its charge (if any) written as a
    /// `charge` ledger entry taking its amount, or what the key has left when that is less; a
    /// result of a request that has one already is skipped with its charge (so a request is
    /// charged once, however often its result is offered). When no request is left without a
    /// result the batch ends (`ended_ms` = `now_ms`). Returns the batch as written; an ended
    /// batch is returned as it is. [`StoreError::BatchNotFound`] when there is no such batch.
    async fn record_batch_results(
        &self,
        id: &str,
        results: &[BatchResult],
        now_ms: u64,
    ) -> Result<Batch, StoreError>;

    /// Moves an `in_progress` batch to `canceling` (`cancel_ms` = `now_ms`), flushed; a batch
    /// in another status is left as it is. Returns the batch as written, `None` when there is
    /// none.
    async fn cancel_batch(&self, id: &str, now_ms: u64) -> Result<Option<Batch>, StoreError>;

    /// Removes a batch, its requests and its index entries, flushed (ledger entries stay).
    /// Returns what was removed.
    async fn delete_batch(&self, id: &str) -> Result<Option<Batch>, StoreError>;

    /// Batches that have not ended (read from an index), for picking up work after a restart.
    async fn open_batches(&self, limit: usize) -> Result<Vec<Batch>, StoreError>;
}
