//! [`Store`] on PostgreSQL (tokio-postgres, pooled by deadpool-postgres): one table per record
//! type, the secondary indexes as indexes, every business step one transaction, so several
//! relay instances can share one database.
//!
//! Tables (created and migrated by [`PgStore::connect`], `pg_store/migrations/*.sql`):
//!
//! | table               | holds                                                              |
//! |---------------------|--------------------------------------------------------------------|
//! | `tasks`             | id, owner, kind, status, model, `created` (the id's ULID), `due_ms`, `params` (the JSON text as written), the rest of the [`Task`] as `record` jsonb |
//! | `keys`              | id, `hash` (unique), the [`Key`] as jsonb                         |
//! | `ledger`            | task entries, `seq` from `ledger_seq`; unique `(task_id, kind)`   |
//! | `usage`             | charges of work without a task: a batch shares one `seq`, `ord` is its place |
//! | `meta`              | name, value bytes                                                  |
//! | `webhooks`          | id, `task_id`, `status`, `due_ms` (the next attempt while pending), `owner`, `url`, the [`Webhook`] as JSON text |
//! | `libraries`         | id, owner, the [`Library`] (with its `asset_count`) as jsonb      |
//! | `assets`            | id, library, status, type, `expiry` (`expires_at` while active), the [`AssetRecord`] as jsonb |
//! | `batches`           | id, owner, `open` (until it ended; indexed), the [`Batch`] as jsonb |
//! | `batch_items`       | `(batch_id, idx)`, the [`BatchItem`] (request and result) as JSON text |
//! | `characters`        | id, owner (indexed with the id), the [`Character`] as JSON text    |
//! | `idempotency`       | `(key_id, idem_key)`, `created_ms` (indexed, for the sweep), the [`IdemRecord`](crate::IdemRecord) as JSON text |
//! | `schema_migrations` | the versions applied, each with its time                           |
//!
//! Indexes: tasks by `(owner, kind, id)`, `(owner, created, id)` and `(created, id)`; the due
//! index `(due_ms, id)` over unfinished tasks only; assets by library, the `processing` ones,
//! and by expiry; characters by `(owner, id)`. Ids and owners compare byte by byte (`COLLATE "C"`), so pages and cursors
//! run in the same order as on sled.
//!
//! Every unfinished task has a `due_ms`: its `next_poll_ms`, or the end of time when it has
//! none (so [`Store::unfinished_tasks`] finds it and [`Store::claim_due`] never does); a final
//! task has none. A claim is one statement that locks the earliest due rows with `FOR UPDATE
//! SKIP LOCKED` and moves their due time (and the record's `next_poll_ms`) to the end of the
//! lease: instances claiming at once never get the same task, and a task whose holder died is
//! due again when its lease runs out.
//!
//! A step that reads before it writes locks what it read (`SELECT ... FOR UPDATE`: the task of
//! a transition to a final status or with ledger entries, the key of a ledger entry, the library of an asset creation or deletion; a
//! character's creation, which counts its owner's rows, takes the owner's advisory lock), so
//! steps on the same rows run one after the other under PostgreSQL's default isolation; a
//! step PostgreSQL rolls back as a deadlock or serialization failure runs again (`update`
//! closures may run more than once). Keys of a batch of charges are locked in id order. A
//! transition to an unfinished status without ledger entries (a submission's mark, its
//! acceptance, a reschedule, a renewal) starts from the row as this store last created, claimed
//! or wrote it ([`versions`]), else reads it unlocked, and writes it only if the row is still that
//! version (its `xmin`), in one statement with the other such writes waiting at once, committed
//! on its own ([`moves`]); it reads again when the row changed, and takes the locked
//! transaction after a few such tries.
//!
//! Task creations share a commit ([`group`]): the creations waiting at once are written in one
//! transaction, with one lock of each key's row and one WAL flush, each decided with the single
//! step's checks before any is written; a caller is answered after the group's commit. A group
//! that only takes from quotas is written blind, in one round trip that checks each key's
//! quota in the write (the key's row locked only from the write to the commit); when a key
//! does not cover it, nothing is written and the group is decided creation by creation.
//!
//! Statements are prepared once per connection and kept in its cache (none is sent as text to
//! be parsed again); the texts are constants, or built from which filters a listing has,
//! never from values, so the cache stays small. A step that writes runs `BEGIN`, its
//! statements and `COMMIT`, writing together what goes together in one statement (a ledger
//! entry and its key's quota, an asset and its library's count) and reading what it checks in
//! the statement that takes its lock (whether a ledger entry is new, with its key); a read is
//! one statement on a pooled connection, without a transaction.
//!
//! Durability is PostgreSQL's: a step (a task creation too, whose group commits before it
//! returns) returns after its commit, which the server has made durable (as the session's
//! `synchronous_commit` says, `on` by default), so [`Store::flush`] has nothing to do. A
//! step that holds a key's row (a group of creations, a transition with ledger entries, a
//! batch of charges) commits with `synchronous_commit` off so that it lets the row go at once,
//! and is followed by a transaction writing one empty logical message whose durable commit
//! covers the step's: the step returns after both ([`txn::Commits`]).
//! Connections use plain TCP (no TLS yet).
//!
//! | module    | holds                                                                  |
//! |-----------|------------------------------------------------------------------------|
//! | `tasks`   | the task steps: create, transition, delete, listings, claims           |
//! | `ledger`  | pre-deduction, settlement and refund against the quota; charges        |
//! | `keys`    | keys by id and by hash; `meta`                                         |
//! | `assets`  | asset libraries and assets                                             |
//! | `batches` | message batches: their requests, results with their charges            |
//! | `characters` | characters of the first format: created within their owner's number (under the owner's advisory lock), with their charge; listings; deletion |
//! | `webhooks` | webhooks: written with a task's end, claims, attempts, listings       |
//! | `idempotency` | idempotency records: claims, completion (with a task, an asset or a batch), sweep |
//! | `group`   | group commit of task creations: the committer, the blind write of a group, or its reads, decisions and one write |
//! | `moves`   | group commit of transitions' compare-and-swap writes: one statement, one commit |
//! | `pool`    | [`PgStore`]: connecting, the pool                                      |
//! | `versions` | the task rows this store created, claimed or moved last, with their versions (`xmin`): a transition's write without its read |
//! | `migrate` | the schema's versions and their application                            |
//! | `names`   | the enums as the text of their columns                                 |
//! | `txn`     | statements (prepared, cached), a step's failure, running a transaction again, records as JSON |

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
mod group;
mod idempotency;
mod keys;
mod ledger;
mod migrate;
mod moves;
mod names;
mod pool;
mod queues;
mod tasks;
mod txn;
mod versions;
mod webhooks;

pub use pool::PgStore;

use txn::{Sql, retry, unix_secs};

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`,
    /// with libpq's parameters such as `options=-c search_path=relay` or `connect_timeout=5`)
    /// with at most `pool_size` connections (at least 1), brings its schema up to date, and
    /// starts the committer of task creations ([`group`]) and the writer of transitions
    /// ([`moves`]).
    ///
    /// A database that cannot be reached, or whose schema is newer than this build knows
    /// ([`StoreError::SchemaTooNew`]), is an error.
    pub async fn connect(url: &str, pool_size: usize) -> Result<PgStore, StoreError> {
        let store = PgStore::open(url, pool_size).await?;
        Ok(PgStore {
            committer: Some(group::start(store.clone())),
            mover: Some(moves::start(store.clone())),
            ..store
        })
    }

    /// A task's creation (with its record's completion), committed with the creations of
    /// other requests waiting at the same time ([`group`]): returns after its commit.
    async fn create(
        &self,
        task: &Task,
        ledger: &[LedgerDraft],
        idem: Option<(IdemTicket, IdemAnswer)>,
    ) -> Result<(), StoreError> {
        let (task, row) = tasks::new_task(task)?;
        let (done, answer) = tokio::sync::oneshot::channel();
        let creation = queues::Creation {
            task,
            row,
            ledger: ledger.to_vec(),
            idem,
            at: unix_secs(),
            done,
        };
        let Some(committer) = &self.committer else {
            return group::single(self, &creation).await;
        };
        match committer.send(creation) {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                Err(StoreError::Backend(
                    "create task: the committer stopped before its answer".into(),
                ))
            }),
            // The committer is gone (its runtime stopped): a step of its own.
            Err(tokio::sync::mpsc::error::SendError(creation)) => {
                group::single(self, &creation).await
            }
        }
    }
}

#[async_trait::async_trait]
impl Store for PgStore {
    fn shared(&self) -> bool {
        true
    }

    async fn create_task(&self, task: &Task, ledger: &[LedgerDraft]) -> Result<(), StoreError> {
        self.create(task, ledger, None).await
    }

    async fn task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        tasks::get(self, id).await
    }

    async fn create_task_idempotent(
        &self,
        task: &Task,
        ledger: &[LedgerDraft],
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        self.create(task, ledger, Some((ticket.clone(), answer.clone())))
            .await
    }

    async fn claim_idempotency(
        &self,
        ticket: &IdemTicket,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<IdemClaim, StoreError> {
        idempotency::claim(self, ticket, fingerprint, now_ms).await
    }

    async fn finish_idempotency(
        &self,
        ticket: &IdemTicket,
        answer: Option<&IdemAnswer>,
    ) -> Result<(), StoreError> {
        idempotency::finish(self, ticket, answer).await
    }

    async fn sweep_idempotency(&self, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
        idempotency::sweep(self, before_ms, limit).await
    }

    async fn list_tasks(&self, query: &TaskQuery) -> Result<Page<Task>, StoreError> {
        tasks::list(self, query).await
    }

    async fn admin_tasks(&self, query: &AdminTaskQuery) -> Result<Page<Task>, StoreError> {
        tasks::admin(self, query).await
    }

    async fn transition(
        &self,
        id: &str,
        from: &[TaskStatus],
        to: TaskStatus,
        update: TaskUpdate<'_>,
        ledger: &[LedgerDraft],
    ) -> Result<Task, StoreError> {
        if ledger.is_empty()
            && !to.is_final()
            && let Some(task) = tasks::transition_alone(self, id, from, to, update).await?
        {
            return Ok(task);
        }
        // The locked step reads and writes the row itself; what was kept of it goes out of date.
        self.versions.forget(id);
        let at = unix_secs();
        let what = format!("transition task {id}");
        let what = what.as_str();
        // With ledger entries the key's row is locked: the commit lets it go early.
        let commits = if ledger.is_empty() {
            txn::Commits::PLAIN
        } else {
            self.commits
        };
        retry(what, || async move {
            let mut client = self.client(what).await?;
            let tx = client.transaction().await.sql(what)?;
            let (_, task) = tokio::try_join!(
                commits.let_go(&tx, what),
                tasks::transition(&tx, id, from, to, update)
            )?;
            ledger::apply(&tx, ledger, at).await?;
            tx.commit().await.sql(what)?;
            commits.flushed(&client, what).await?;
            Ok(task)
        })
        .await
    }

    async fn claim_due(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        tasks::claim(self, now_ms, lease_ms, limit).await
    }

    async fn task_counts(&self) -> Result<Vec<TaskCount>, StoreError> {
        tasks::counts(self).await
    }

    async fn pick_webhooks(
        &self,
        now_ms: u64,
        lease_ms: u64,
        scan: usize,
        pick: WebhookPicker<'_>,
    ) -> Result<Vec<Webhook>, StoreError> {
        if scan == 0 {
            return Ok(Vec::new());
        }
        webhooks::pick(self, now_ms, lease_ms, scan, pick).await
    }

    async fn record_webhook_attempt(
        &self,
        id: &str,
        attempt: &WebhookAttempt,
        outcome: WebhookOutcome,
    ) -> Result<Webhook, StoreError> {
        let what = format!("record webhook {id}");
        let what = what.as_str();
        retry(what, || async move {
            let mut client = self.client(what).await?;
            let tx = client.transaction().await.sql(what)?;
            let webhook = webhooks::record(&tx, id, attempt, outcome).await?;
            tx.commit().await.sql(what)?;
            Ok(webhook)
        })
        .await
    }

    async fn webhooks(&self, query: &WebhookQuery) -> Result<Page<Webhook>, StoreError> {
        webhooks::list(self, query).await
    }

    async fn unfinished_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        tasks::unfinished(self, limit).await
    }

    async fn delete_task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        tasks::delete(self, id).await
    }

    async fn create_key(&self, key: &Key) -> Result<(), StoreError> {
        keys::create(self, key).await
    }

    async fn key(&self, id: &str) -> Result<Option<Key>, StoreError> {
        keys::get_by_id(self, id).await
    }

    async fn key_by_hash(&self, hash: &str) -> Result<Option<Key>, StoreError> {
        keys::by_hash(self, hash).await
    }

    async fn keys(&self) -> Result<Vec<Key>, StoreError> {
        keys::all(self).await
    }

    async fn key_count(&self) -> Result<usize, StoreError> {
        keys::count(self).await
    }

    async fn update_key(&self, id: &str, update: KeyUpdate<'_>) -> Result<Key, StoreError> {
        keys::update(self, id, update).await
    }

    async fn charges(&self, charges: &[Charge]) -> Result<Vec<i64>, StoreError> {
        ledger::charges(self, charges).await
    }

    async fn ledger(&self, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        ledger::entries(self, key_id).await
    }

    async fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        keys::meta(self, name).await
    }

    async fn meta_init(&self, name: &str, value: &[u8]) -> Result<Vec<u8>, StoreError> {
        keys::meta_init(self, name, value).await
    }

    /// Nothing to do: every step returned after its commit, which PostgreSQL made durable.
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn create_character(
        &self,
        character: &Character,
        max_per_owner: u64,
        ledger: &[LedgerDraft],
    ) -> Result<(), StoreError> {
        characters::create(self, character, max_per_owner, ledger).await
    }

    async fn character(&self, id: &str) -> Result<Option<Character>, StoreError> {
        characters::get(self, id).await
    }

    async fn list_characters(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Character>, StoreError> {
        characters::list(self, owner, after, limit, order).await
    }

    async fn delete_character(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Character>, StoreError> {
        characters::delete(self, id, owner).await
    }

    async fn create_library(&self, library: &Library) -> Result<(), StoreError> {
        assets::create_library(self, library).await
    }

    async fn library(&self, id: &str) -> Result<Option<Library>, StoreError> {
        assets::library(self, id).await
    }

    async fn list_libraries(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Library>, StoreError> {
        assets::list_libraries(self, owner, after, limit, order).await
    }

    async fn delete_library(
        &self,
        id: &str,
    ) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError> {
        assets::delete_library(self, id).await
    }

    async fn create_asset(&self, asset: &AssetRecord) -> Result<(), StoreError> {
        assets::create_asset(self, asset, None).await
    }

    async fn create_asset_idempotent(
        &self,
        asset: &AssetRecord,
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        assets::create_asset(self, asset, Some((ticket, answer))).await
    }

    async fn asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        assets::asset(self, id).await
    }

    async fn list_assets(&self, query: &AssetQuery) -> Result<Page<AssetRecord>, StoreError> {
        assets::list_assets(self, query).await
    }

    async fn transition_asset(
        &self,
        id: &str,
        from: &[AssetStatus],
        to: AssetStatus,
        update: AssetUpdate<'_>,
    ) -> Result<AssetRecord, StoreError> {
        assets::transition_asset(self, id, from, to, update).await
    }

    async fn expired_assets(
        &self,
        now_secs: u64,
        limit: usize,
    ) -> Result<Vec<AssetRecord>, StoreError> {
        assets::expired_assets(self, now_secs, limit).await
    }

    async fn processing_assets(&self, limit: usize) -> Result<Vec<AssetRecord>, StoreError> {
        assets::processing_assets(self, limit).await
    }

    async fn delete_asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        assets::delete_asset(self, id).await
    }

    async fn create_batch(&self, batch: &Batch, items: &[BatchItem]) -> Result<(), StoreError> {
        batches::create(self, batch, items, None).await
    }

    async fn create_batch_idempotent(
        &self,
        batch: &Batch,
        items: &[BatchItem],
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        batches::create(self, batch, items, Some((ticket, answer))).await
    }

    async fn batch(&self, id: &str) -> Result<Option<Batch>, StoreError> {
        batches::batch(self, id).await
    }

    async fn list_batches(
        &self,
        owner: &str,
        after: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Page<Batch>, StoreError> {
        batches::list(self, owner, after, before, limit).await
    }

    async fn batch_items(
        &self,
        id: &str,
        from: u32,
        limit: usize,
    ) -> Result<Vec<BatchItem>, StoreError> {
        batches::items(self, id, from, limit).await
    }

    async fn record_batch_results(
        &self,
        id: &str,
        results: &[BatchResult],
        now_ms: u64,
    ) -> Result<Batch, StoreError> {
        batches::record(self, id, results, now_ms).await
    }

    async fn cancel_batch(&self, id: &str, now_ms: u64) -> Result<Option<Batch>, StoreError> {
        batches::cancel(self, id, now_ms).await
    }

    async fn delete_batch(&self, id: &str) -> Result<Option<Batch>, StoreError> {
        batches::delete(self, id).await
    }

    async fn open_batches(&self, limit: usize) -> Result<Vec<Batch>, StoreError> {
        batches::open_batches(self, limit).await
    }
}

#[cfg(test)]
mod tests;
