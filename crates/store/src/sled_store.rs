//! [`Store`] on sled 0.34: one tree per record type and one per secondary index, every business
//! step in one multi-tree transaction (the task creations and moves of one flush share one).
//!
//! Trees:
//!
//! | tree             | key                                      | value            |
//! |------------------|------------------------------------------|------------------|
//! | `tasks`          | task id                                  | JSON [`Task`]    |
//! | `tasks_by_owner` | owner `\0` kind byte `\0` task id        | empty            |
//! | `due`            | due time (ms, 8 bytes big-endian) task id| empty            |
//! | `keys`           | key id                                   | JSON [`Key`]     |
//! | `keys_by_hash`   | secret hash                              | key id           |
//! | `ledger`         | key id `\0` sequence (8 bytes big-endian)| JSON [`LedgerEntry`] |
//! | `ledger_by_task` | task id `\0` kind name                   | entry id         |
//! | `meta`           | name                                     | raw bytes        |
//! | `webhooks`       | webhook id                               | JSON [`Webhook`](crate::Webhook) |
//! | `webhooks_due`   | next attempt (ms, 8 bytes big-endian) webhook id | owner `\0` URL (empty when written by an earlier version) |
//! | `webhooks_by_task` | task id `\0` webhook id               | empty            |
//! | `characters`     | character id                             | JSON [`Character`] |
//! | `characters_by_owner` | owner `\0` character id            | empty            |
//! | `character_counts` | owner                                  | the owner's number of characters (8 bytes big-endian) |
//! | `idempotency`    | API key id `\0` idempotency key         | JSON [`IdemRecord`](crate::IdemRecord) |
//! | `idempotency_by_time` | claim time (ms, 8 bytes big-endian) API key id `\0` idempotency key | empty |
//!
//! Every unfinished task has exactly one `due` entry (at `next_poll_ms`, or at `u64::MAX` when
//! it has none, so that [`Store::unfinished_tasks`] still finds it but
//! [`Store::claim_due`] never does); a final task has none. `ledger_by_task` makes a ledger
//! entry's `(task_id, kind)` unique.
//!
//! Flushes are shared: a caller that must flush waits for a flush that began after its write
//! (`flush.rs`), so concurrent acknowledgements cost one disk sync, not one each. A task's
//! creation (with the `Idempotency-Key` claim it completes, if any) and move are not written
//! by their callers: they are handed to that group commit,
//! whose flush writes every one handed to it since the last in one transaction, just before
//! it syncs (sled writes out its log buffer for each transaction, on its IO threads). A move
//! is computed from the task's record as read and written only while that record is still
//! the task's; otherwise its caller reads the task again and computes it anew.
//!
//! Asset libraries and assets have trees of their own, described in `sled_store/assets.rs`;
//! so have message batches, in `sled_store/batches.rs`.
//!
//! sled 0.34 runs transactions under one process-wide lock, so they are serialised; closures
//! only use the transactional trees (a plain tree call inside one would deadlock).
//!
//! Here the steps are named, and a task's creation or transition is put together with its
//! ledger entries into one transaction (no status change without its ledger entries); each
//! step lives in a module of its own, and a module uses only those below it:
//!
//! | module       | holds                                                              |
//! |--------------|--------------------------------------------------------------------|
//! | `tasks`      | the task steps: create, transition, delete, listings, claims       |
//! | `ledger`     | pre-deduction, settlement and refund against the quota; charges    |
//! | `keys`       | keys by id and by hash; `meta`                                     |
//! | `task_index` | the keys of `tasks_by_owner` and `due`                             |
//! | `webhooks`   | webhooks: written with a task's end, claims, attempts, listings    |
//! | `idempotency` | idempotency records: claims, completion (with a task, an asset or a batch), sweep |
//! | `trees`      | [`SledStore`]: opening, the transactions of a step, flushing       |
//! | `assets`     | asset libraries and assets                                         |
//! | `batches`    | message batches: their requests, results with their charges        |
//! | `characters` | characters of the first format: created within their owner's number, with their charge; listings; deletion |
//! | `index`      | index keys and ranges every index shares                           |
//! | `counts`     | tasks by kind and status, kept after each step's commit; left by a clean stop for the next opening |
//! | `txn`        | sets of trees; a transaction over one, its outcome as [`StoreError`] |
//! | `record`     | records as JSON, reads by id, sled's errors as the store's         |
//! | `flush`      | group commit; each flush writes the steps handed to it first      |

use std::sync::Arc;

use crate::steps::{AssetUpdate, KeyUpdate, TaskUpdate};
use crate::{
    AdminTaskQuery, AssetQuery, AssetRecord, AssetStatus, Batch, BatchItem, BatchResult, Character,
    Charge, Claim, IdemAnswer, IdemClaim, IdemTicket, Key, LedgerDraft, LedgerEntry, Library,
    Order, Page, Store, StoreError, Task, TaskCount, TaskQuery, TaskStatus, Webhook,
    WebhookAttempt, WebhookOutcome, WebhookPicker, WebhookQuery,
};

mod assets;
mod batches;
mod characters;
mod counts;
mod flush;
mod idempotency;
mod index;
mod keys;
mod ledger;
mod locked;
mod record;
mod task_index;
mod tasks;
mod trees;
mod txn;
mod usage_chunk;
mod usage_log;
mod webhooks;

pub use trees::SledStore;
use trees::{Creation, DEFAULT_CACHE_BYTES, Write};

/// How often [`Store::transition`] computes its move again when other steps keep writing the
/// task before it is written.
const MOVE_ATTEMPTS: usize = 64;

impl SledStore {
    /// Opens (or creates) the database in `dir`.
    ///
    /// A database sled cannot open (for instance after an abrupt stop) is an error, never a
    /// panic: the caller decides what to do with it.
    pub fn open(dir: &std::path::Path) -> Result<SledStore, StoreError> {
        SledStore::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the database in `dir`, caching at most about `cache_bytes` of its
    /// pages in memory.
    pub fn open_with_cache(
        dir: &std::path::Path,
        cache_bytes: u64,
    ) -> Result<SledStore, StoreError> {
        let store = SledStore::open_with(dir, cache_bytes, tasks::commit)?;
        let indexed = characters::index_earlier(&store)?;
        if indexed > 0 {
            tracing::info!(
                characters = indexed,
                "characters of an earlier version indexed"
            );
        }
        Ok(store)
    }

    /// Hands `task`'s creation with its ledger drafts (and the `Idempotency-Key` claim it
    /// completes, if any) to the group commit, and waits for its flush.
    async fn hand_creation(
        &self,
        task: &Task,
        ledger: &[LedgerDraft],
        claim: Option<Box<(IdemTicket, IdemAnswer)>>,
    ) -> Result<(), StoreError> {
        let (task, bytes) = tasks::new_record(task)?;
        let what = format!("create task {}", task.id);
        let creation = Creation {
            task: Box::new(task),
            bytes,
            ledger: ledger.to_vec(),
            at: ledger::unix_secs(),
            claim,
        };
        self.flusher
            .commit(self, Write::Create(creation), &what)
            .await
            .map(drop)
    }
}

#[async_trait::async_trait]
impl Store for SledStore {
    /// Handed to the group commit: the task steps of one flush share a transaction.
    async fn create_task(&self, task: &Task, ledger: &[LedgerDraft]) -> Result<(), StoreError> {
        self.hand_creation(task, ledger, None).await
    }

    async fn task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        Ok(tasks::get_by_id(self, id)?.map(Arc::unwrap_or_clone))
    }

    async fn task_shared(&self, id: &str) -> Result<Option<Arc<Task>>, StoreError> {
        tasks::get_by_id(self, id)
    }

    async fn create_task_idempotent(
        &self,
        task: &Task,
        ledger: &[LedgerDraft],
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        // With the plain creations of its flush, its claim completed in the same transaction.
        let claim = Box::new((ticket.clone(), answer.clone()));
        self.hand_creation(task, ledger, Some(claim)).await
    }

    async fn claim_idempotency(
        &self,
        ticket: &IdemTicket,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<IdemClaim, StoreError> {
        idempotency::claim(self, ticket, fingerprint, now_ms)
    }

    async fn finish_idempotency(
        &self,
        ticket: &IdemTicket,
        answer: Option<&IdemAnswer>,
    ) -> Result<(), StoreError> {
        idempotency::finish(self, ticket, answer)?;
        self.flush_after("finish an idempotency claim").await
    }

    async fn sweep_idempotency(&self, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
        idempotency::sweep(self, before_ms, limit)
    }

    async fn list_tasks(&self, query: &TaskQuery) -> Result<Page<Task>, StoreError> {
        tasks::list(self, query)
    }

    async fn admin_tasks(&self, query: &AdminTaskQuery) -> Result<Page<Task>, StoreError> {
        tasks::admin(self, query)
    }

    async fn transition(
        &self,
        id: &str,
        from: &[TaskStatus],
        to: TaskStatus,
        update: TaskUpdate<'_>,
        ledger: &[LedgerDraft],
    ) -> Result<Task, StoreError> {
        let what = format!("transition task {id}");
        // Computed from the record as read, written only while it is still the task's: a step
        // that wrote the task in between makes this one read it again and compare anew.
        for _ in 0..MOVE_ATTEMPTS {
            let (step, task) = tasks::prepare_move(self, id, from, to, update, ledger)?;
            let written = self.flusher.commit(self, Write::Move(step), &what).await?;
            if written {
                return Ok(task);
            }
        }
        Err(StoreError::Backend(format!(
            "{what}: the task changed under each of {MOVE_ATTEMPTS} attempts"
        )))
    }

    async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        tasks::claim(self, now_ms, lease_ms, limit)
    }

    async fn task_counts(&self) -> Result<Vec<TaskCount>, StoreError> {
        Ok(self.counts.all())
    }

    async fn pick_webhooks(
        &self,
        now_ms: u64,
        lease_ms: u64,
        scan: usize,
        pick: WebhookPicker<'_>,
    ) -> Result<Vec<Webhook>, StoreError> {
        webhooks::pick(self, now_ms, lease_ms, scan, pick)
    }

    async fn record_webhook_attempt(
        &self,
        id: &str,
        attempt: &WebhookAttempt,
        outcome: WebhookOutcome,
    ) -> Result<Webhook, StoreError> {
        let webhook = webhooks::record(self, id, attempt, outcome)?;
        self.flush_after(&format!("record webhook {id}")).await?;
        Ok(webhook)
    }

    async fn webhooks(&self, query: &WebhookQuery) -> Result<Page<Webhook>, StoreError> {
        webhooks::list(self, query)
    }

    async fn unfinished_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        tasks::unfinished(self, limit)
    }

    async fn delete_task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        let removed = tasks::delete(self, id)?;
        if let Some(task) = &removed {
            self.counts.remove(task.kind, task.status);
            self.flush_after(&format!("delete task {id}")).await?;
        }
        Ok(removed)
    }

    async fn create_key(&self, key: &Key) -> Result<(), StoreError> {
        keys::create(self, key)?;
        self.flush_after(&format!("create key {}", key.id)).await
    }

    async fn key(&self, id: &str) -> Result<Option<Key>, StoreError> {
        keys::get_by_id(self, id)
    }

    async fn key_by_hash(&self, hash: &str) -> Result<Option<Key>, StoreError> {
        keys::by_hash(self, hash)
    }

    async fn keys(&self) -> Result<Vec<Key>, StoreError> {
        keys::all(self)
    }

    async fn key_count(&self) -> Result<usize, StoreError> {
        Ok(self.trees.keys.len())
    }

    async fn update_key(&self, id: &str, update: KeyUpdate<'_>) -> Result<Key, StoreError> {
        let key = keys::update(self, id, update)?;
        self.flush_after(&format!("update key {id}")).await?;
        Ok(key)
    }

    async fn charges(&self, charges: &[Charge]) -> Result<Vec<i64>, StoreError> {
        ledger::charges(self, charges)
    }

    async fn ledger(&self, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        ledger::entries(self, key_id)
    }

    async fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        keys::meta(self, name)
    }

    async fn meta_init(&self, name: &str, value: &[u8]) -> Result<Vec<u8>, StoreError> {
        let (stored, written) = keys::meta_init(self, name, value)?;
        if written {
            self.flush_after(&format!("init meta {name}")).await?;
        }
        Ok(stored)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.flush_after("flush").await
    }

    async fn close(&self) -> Result<(), StoreError> {
        // Creations still handed to the group commit are counted before the counts are left.
        self.flush_after("close").await?;
        self.leave_counts()?;
        self.flush_after("close").await
    }

    async fn create_character(
        &self,
        character: &Character,
        max_per_owner: u64,
        ledger: &[LedgerDraft],
    ) -> Result<(), StoreError> {
        characters::create(self, character, max_per_owner, ledger)?;
        self.flush_after(&format!("create character {}", character.id))
            .await
    }

    async fn character(&self, id: &str) -> Result<Option<Character>, StoreError> {
        characters::get(self, id)
    }

    async fn list_characters(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Character>, StoreError> {
        characters::list(self, owner, after, limit, order)
    }

    async fn delete_character(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Character>, StoreError> {
        let removed = characters::delete(self, id, owner)?;
        if removed.is_some() {
            self.flush_after(&format!("delete character {id}")).await?;
        }
        Ok(removed)
    }

    async fn create_library(&self, library: &Library) -> Result<(), StoreError> {
        assets::create_library(&self.assets, library)?;
        self.flush_after(&format!("create library {}", library.id))
            .await
    }

    async fn library(&self, id: &str) -> Result<Option<Library>, StoreError> {
        assets::library(&self.assets, id)
    }

    async fn list_libraries(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Library>, StoreError> {
        assets::list_libraries(&self.assets, owner, after, limit, order)
    }

    async fn delete_library(
        &self,
        id: &str,
    ) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError> {
        let removed = assets::delete_library(&self.assets, id)?;
        if removed.is_some() {
            self.flush_after(&format!("delete library {id}")).await?;
        }
        Ok(removed)
    }

    async fn create_asset(&self, asset: &AssetRecord) -> Result<(), StoreError> {
        assets::create_asset(&self.assets, asset)?;
        self.flush_after(&format!("create asset {}", asset.id))
            .await
    }

    async fn create_asset_idempotent(
        &self,
        asset: &AssetRecord,
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        let bytes = assets::new_asset(asset)?;
        let what = format!("create asset {}", asset.id);
        let a = &self.assets;
        let trees = (
            &a.libraries,
            &a.libraries_by_owner,
            &a.assets,
            &a.assets_by_library,
            &a.assets_by_expiry,
            &a.assets_processing,
            &self.trees.idempotency,
        );
        txn::run(&what, &trees, |(l, lo, at, al, ae, ap, idem)| {
            let tx = assets::Tx {
                libraries: l,
                libraries_by_owner: lo,
                assets: at,
                assets_by_library: al,
                assets_by_expiry: ae,
                assets_processing: ap,
            };
            assets::insert_asset(&tx, asset, &bytes)?;
            idempotency::complete(idem, ticket, answer)
        })?;
        self.flush_after(&what).await
    }

    async fn asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        assets::asset(&self.assets, id)
    }

    async fn list_assets(&self, query: &AssetQuery) -> Result<Page<AssetRecord>, StoreError> {
        assets::list_assets(&self.assets, query)
    }

    async fn transition_asset(
        &self,
        id: &str,
        from: &[AssetStatus],
        to: AssetStatus,
        update: AssetUpdate<'_>,
    ) -> Result<AssetRecord, StoreError> {
        let asset = assets::transition_asset(&self.assets, id, from, to, update)?;
        self.flush_after(&format!("transition asset {id}")).await?;
        Ok(asset)
    }

    async fn expired_assets(
        &self,
        now_secs: u64,
        limit: usize,
    ) -> Result<Vec<AssetRecord>, StoreError> {
        assets::expired_assets(&self.assets, now_secs, limit)
    }

    async fn processing_assets(&self, limit: usize) -> Result<Vec<AssetRecord>, StoreError> {
        assets::processing_assets(&self.assets, limit)
    }

    async fn delete_asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        let removed = assets::delete_asset(&self.assets, id)?;
        if removed.is_some() {
            self.flush_after(&format!("delete asset {id}")).await?;
        }
        Ok(removed)
    }

    async fn create_batch(&self, batch: &Batch, items: &[BatchItem]) -> Result<(), StoreError> {
        batches::create(self, batch, items, None)?;
        self.flush_after(&format!("create batch {}", batch.id))
            .await
    }

    async fn create_batch_idempotent(
        &self,
        batch: &Batch,
        items: &[BatchItem],
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        batches::create(self, batch, items, Some((ticket, answer)))?;
        self.flush_after(&format!("create batch {}", batch.id))
            .await
    }

    async fn batch(&self, id: &str) -> Result<Option<Batch>, StoreError> {
        batches::batch(self, id)
    }

    async fn list_batches(
        &self,
        owner: &str,
        after: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Page<Batch>, StoreError> {
        batches::list(self, owner, after, before, limit)
    }

    async fn batch_items(
        &self,
        id: &str,
        from: u32,
        limit: usize,
    ) -> Result<Vec<BatchItem>, StoreError> {
        batches::items(self, id, from, limit)
    }

    async fn record_batch_results(
        &self,
        id: &str,
        results: &[BatchResult],
        now_ms: u64,
    ) -> Result<Batch, StoreError> {
        let batch = batches::record(self, id, results, now_ms)?;
        self.flush_after(&format!("record results of batch {id}"))
            .await?;
        Ok(batch)
    }

    async fn cancel_batch(&self, id: &str, now_ms: u64) -> Result<Option<Batch>, StoreError> {
        let batch = batches::cancel(self, id, now_ms)?;
        self.flush_after(&format!("cancel batch {id}")).await?;
        Ok(batch)
    }

    async fn delete_batch(&self, id: &str) -> Result<Option<Batch>, StoreError> {
        let batch = batches::delete(self, id)?;
        if batch.is_some() {
            self.flush_after(&format!("delete batch {id}")).await?;
        }
        Ok(batch)
    }

    async fn open_batches(&self, limit: usize) -> Result<Vec<Batch>, StoreError> {
        batches::open_batches(self, limit)
    }
}

#[cfg(test)]
mod tests;
