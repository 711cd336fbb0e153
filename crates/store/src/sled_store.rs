//! [`Store`] on sled 0.34: one tree per record type and one per secondary index, every business
//! step one multi-tree transaction.
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
//!
//! Every unfinished task has exactly one `due` entry (at `next_poll_ms`, or at `u64::MAX` when
//! it has none, so that [`Store::unfinished_tasks`] still finds it but
//! [`Store::due_tasks`] never does); a final task has none. `ledger_by_task` makes a ledger
//! entry's `(task_id, kind)` unique.
//!
//! Flushes are shared: a caller that must flush waits for a flush that began after its write
//! (`flush.rs`), so concurrent acknowledgements cost one disk sync, not one each.
//!
//! Asset libraries and assets have trees of their own, described in `sled_store/assets.rs`.
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
//! | `tasks`      | the task steps: create, transition, delete, listings, due tasks    |
//! | `ledger`     | pre-deduction, settlement and refund against the quota; charges    |
//! | `keys`       | keys by id and by hash; `meta`                                     |
//! | `task_index` | the keys of `tasks_by_owner` and `due`                             |
//! | `trees`      | [`SledStore`]: opening, the transactions of a step, flushing       |
//! | `assets`     | asset libraries and assets                                         |
//! | `index`      | index keys and ranges every index shares                           |
//! | `txn`        | sets of trees; a transaction over one, its outcome as [`StoreError`] |
//! | `record`     | records as JSON, reads by id, sled's errors as the store's         |
//! | `flush`      | group commit                                                       |

use crate::{
    AssetQuery, AssetRecord, AssetStatus, Charge, Key, LedgerDraft, LedgerEntry, Library, Order,
    Page, Store, StoreError, Task, TaskQuery, TaskStatus,
};

mod assets;
mod flush;
mod index;
mod keys;
mod ledger;
mod record;
mod task_index;
mod tasks;
mod trees;
mod txn;

pub use trees::SledStore;

impl Store for SledStore {
    fn create_task(&self, task: &Task, ledger: &[LedgerDraft]) -> Result<(), StoreError> {
        let (task, bytes) = tasks::new_record(task)?;
        let at = ledger::unix_secs();
        let what = format!("create task {}", task.id);
        self.trees.tx(&what, |tx| {
            tasks::insert(tx, &task, &bytes)?;
            ledger::apply(&tx.ledger(), ledger, at)
        })?;
        self.flush_after(&what)
    }

    fn task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        tasks::get_by_id(self, id)
    }

    fn list_tasks(&self, query: &TaskQuery) -> Result<Page<Task>, StoreError> {
        tasks::list(self, query)
    }

    fn all_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        tasks::all(self, limit)
    }

    fn transition(
        &self,
        id: &str,
        from: &[TaskStatus],
        to: TaskStatus,
        update: &dyn Fn(&mut Task),
        ledger: &[LedgerDraft],
    ) -> Result<Task, StoreError> {
        let at = ledger::unix_secs();
        let what = format!("transition task {id}");
        let task = self.trees.tx(&what, |tx| {
            let task = tasks::transition(tx, id, from, to, update)?;
            ledger::apply(&tx.ledger(), ledger, at)?;
            Ok(task)
        })?;
        self.flush_after(&what)?;
        Ok(task)
    }

    fn due_tasks(&self, now_ms: u64, limit: usize) -> Result<Vec<Task>, StoreError> {
        tasks::due(self, now_ms, limit)
    }

    fn unfinished_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        tasks::unfinished(self, limit)
    }

    fn delete_task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        tasks::delete(self, id)
    }

    fn create_key(&self, key: &Key) -> Result<(), StoreError> {
        keys::create(self, key)
    }

    fn key(&self, id: &str) -> Result<Option<Key>, StoreError> {
        keys::get_by_id(self, id)
    }

    fn key_by_hash(&self, hash: &str) -> Result<Option<Key>, StoreError> {
        keys::by_hash(self, hash)
    }

    fn keys(&self) -> Result<Vec<Key>, StoreError> {
        keys::all(self)
    }

    fn key_count(&self) -> Result<usize, StoreError> {
        Ok(self.trees.keys.len())
    }

    fn update_key(&self, id: &str, update: &dyn Fn(&mut Key)) -> Result<Key, StoreError> {
        keys::update(self, id, update)
    }

    fn charges(&self, charges: &[Charge]) -> Result<Vec<i64>, StoreError> {
        ledger::charges(self, charges)
    }

    fn ledger(&self, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        ledger::entries(self, key_id)
    }

    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        keys::meta(self, name)
    }

    fn meta_init(&self, name: &str, value: &[u8]) -> Result<Vec<u8>, StoreError> {
        keys::meta_init(self, name, value)
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.flush_after("flush")
    }

    fn create_library(&self, library: &Library) -> Result<(), StoreError> {
        assets::create_library(&self.assets, library)?;
        self.flush_after(&format!("create library {}", library.id))
    }

    fn library(&self, id: &str) -> Result<Option<Library>, StoreError> {
        assets::library(&self.assets, id)
    }

    fn list_libraries(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Library>, StoreError> {
        assets::list_libraries(&self.assets, owner, after, limit, order)
    }

    fn delete_library(&self, id: &str) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError> {
        let removed = assets::delete_library(&self.assets, id)?;
        if removed.is_some() {
            self.flush_after(&format!("delete library {id}"))?;
        }
        Ok(removed)
    }

    fn create_asset(&self, asset: &AssetRecord) -> Result<(), StoreError> {
        assets::create_asset(&self.assets, asset)?;
        self.flush_after(&format!("create asset {}", asset.id))
    }

    fn asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        assets::asset(&self.assets, id)
    }

    fn list_assets(&self, query: &AssetQuery) -> Result<Page<AssetRecord>, StoreError> {
        assets::list_assets(&self.assets, query)
    }

    fn transition_asset(
        &self,
        id: &str,
        from: &[AssetStatus],
        to: AssetStatus,
        update: &dyn Fn(&mut AssetRecord),
    ) -> Result<AssetRecord, StoreError> {
        let asset = assets::transition_asset(&self.assets, id, from, to, update)?;
        self.flush_after(&format!("transition asset {id}"))?;
        Ok(asset)
    }

    fn expired_assets(&self, now_secs: u64, limit: usize) -> Result<Vec<AssetRecord>, StoreError> {
        assets::expired_assets(&self.assets, now_secs, limit)
    }

    fn processing_assets(&self, limit: usize) -> Result<Vec<AssetRecord>, StoreError> {
        assets::processing_assets(&self.assets, limit)
    }

    fn delete_asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        let removed = assets::delete_asset(&self.assets, id)?;
        if removed.is_some() {
            self.flush_after(&format!("delete asset {id}"))?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests;
