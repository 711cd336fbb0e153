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
//! ([`GroupFlush`]), so concurrent acknowledgements cost one disk sync, not one each.
//!
//! Asset libraries and assets have trees of their own, described in `sled_store/assets.rs`.
//!
//! sled 0.34 runs transactions under one process-wide lock, so they are serialised; closures
//! only use the transactional trees (a plain tree call inside one would deadlock).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, Transactional, TransactionalTree,
};
use sled::{Db, IVec, Tree};

use crate::{
    AssetQuery, AssetRecord, AssetStatus, Charge, Key, LedgerDraft, LedgerEntry, LedgerKind,
    Library, Order, Page, Store, StoreError, Task, TaskKind, TaskQuery, TaskStatus,
};

mod assets;

const TASKS: &str = "tasks";
const TASKS_BY_OWNER: &str = "tasks_by_owner";
const DUE: &str = "due";
const KEYS: &str = "keys";
const KEYS_BY_HASH: &str = "keys_by_hash";
const LEDGER: &str = "ledger";
const LEDGER_BY_TASK: &str = "ledger_by_task";
const META: &str = "meta";

/// The page cache [`SledStore::open`] asks for (sled's own default is 1 GiB).
const DEFAULT_CACHE_BYTES: u64 = 16 << 20;

/// Largest page `list_tasks` returns.
const MAX_PAGE: usize = 100;

/// The embedded store: a sled database in one directory.
#[derive(Clone)]
pub struct SledStore {
    db: Db,
    tasks: Tree,
    tasks_by_owner: Tree,
    due: Tree,
    keys: Tree,
    keys_by_hash: Tree,
    ledger: Tree,
    ledger_by_task: Tree,
    meta: Tree,
    assets: assets::AssetTrees,
    flusher: Arc<GroupFlush>,
}

/// Group commit: callers that need their writes on disk share flushes.
///
/// A caller takes a ticket after its write. A flush that starts after the ticket was taken
/// covers the write; the caller either runs that flush itself (nobody is flushing) or waits
/// for one to finish whose start came after its ticket.
#[derive(Default)]
struct GroupFlush {
    state: Mutex<FlushState>,
    done: Condvar,
}

#[derive(Default)]
struct FlushState {
    /// Tickets handed out so far.
    issued: u64,
    /// Every ticket up to this one is on disk.
    flushed: u64,
    /// A flush is under way.
    running: bool,
    /// The last flush failed: its error, for the callers it covered.
    failed: Option<(u64, String)>,
}

impl GroupFlush {
    fn flush(&self, db: &Db) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.issued += 1;
        let ticket = state.issued;
        loop {
            if state.flushed >= ticket {
                return match &state.failed {
                    Some((upto, e)) if *upto >= ticket => Err(e.clone()),
                    _ => Ok(()),
                };
            }
            if !state.running {
                state.running = true;
                let upto = state.issued;
                drop(state);
                let result = db.flush().map(drop).map_err(|e| e.to_string());
                state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.running = false;
                state.flushed = upto;
                state.failed = result.as_ref().err().map(|e| (upto, e.clone()));
                self.done.notify_all();
                continue;
            }
            state = self.done.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore").finish_non_exhaustive()
    }
}

/// The transactional views of the trees a business step touches.
struct Tx<'a> {
    tasks: &'a TransactionalTree,
    tasks_by_owner: &'a TransactionalTree,
    due: &'a TransactionalTree,
    keys: &'a TransactionalTree,
    keys_by_hash: &'a TransactionalTree,
    ledger: &'a TransactionalTree,
    ledger_by_task: &'a TransactionalTree,
}

/// The trees a ledger entry touches.
struct LedgerTx<'a> {
    keys: &'a TransactionalTree,
    ledger: &'a TransactionalTree,
    ledger_by_task: &'a TransactionalTree,
}

impl<'a> Tx<'a> {
    fn ledger(&self) -> LedgerTx<'a> {
        LedgerTx {
            keys: self.keys,
            ledger: self.ledger,
            ledger_by_task: self.ledger_by_task,
        }
    }
}

type TxResult<T> = Result<T, ConflictableTransactionError<StoreError>>;

fn abort<T>(e: StoreError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

impl SledStore {
    /// Opens (or creates) the database in `dir`.
    ///
    /// A database sled cannot open (for instance after an abrupt stop) is an error, never a
    /// panic: the caller decides what to do with it.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        SledStore::open_with_cache(dir, DEFAULT_CACHE_BYTES)
    }

    /// Opens (or creates) the database in `dir`, caching at most about `cache_bytes` of its
    /// pages in memory.
    pub fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<SledStore, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes.max(1 << 20))
            .open()
            .map_err(|e| StoreError::Backend(format!("open database in {}: {e}", dir.display())))?;
        let tree = |name: &'static str| {
            db.open_tree(name)
                .map_err(|e| StoreError::Backend(format!("open tree {name}: {e}")))
        };
        let store = SledStore {
            tasks: tree(TASKS)?,
            tasks_by_owner: tree(TASKS_BY_OWNER)?,
            due: tree(DUE)?,
            keys: tree(KEYS)?,
            keys_by_hash: tree(KEYS_BY_HASH)?,
            ledger: tree(LEDGER)?,
            ledger_by_task: tree(LEDGER_BY_TASK)?,
            meta: tree(META)?,
            assets: assets::AssetTrees::open(&db)?,
            flusher: Arc::default(),
            db,
        };
        tracing::debug!(
            tasks = store.tasks.len(),
            keys = store.keys.len(),
            "store opened"
        );
        Ok(store)
    }

    /// Runs `f` as one transaction over every tree but `meta`.
    fn tx<A>(&self, what: &str, f: impl Fn(&Tx<'_>) -> TxResult<A>) -> Result<A, StoreError> {
        let trees = (
            &self.tasks,
            &self.tasks_by_owner,
            &self.due,
            &self.keys,
            &self.keys_by_hash,
            &self.ledger,
            &self.ledger_by_task,
        );
        let result = trees.transaction(
            |(tasks, tasks_by_owner, due, keys, keys_by_hash, ledger, ledger_by_task)| {
                f(&Tx {
                    tasks,
                    tasks_by_owner,
                    due,
                    keys,
                    keys_by_hash,
                    ledger,
                    ledger_by_task,
                })
            },
        );
        tx_outcome(what, result)
    }

    fn flush_after(&self, what: &str) -> Result<(), StoreError> {
        self.flusher
            .flush(&self.db)
            .map_err(|e| StoreError::Backend(format!("{what}: flush: {e}")))
    }

    /// Runs `f` as one transaction over the ledger's trees only.
    fn ledger_tx<A>(
        &self,
        what: &str,
        f: impl Fn(&LedgerTx<'_>) -> TxResult<A>,
    ) -> Result<A, StoreError> {
        let trees = (&self.keys, &self.ledger, &self.ledger_by_task);
        let result = trees.transaction(|(keys, ledger, ledger_by_task)| {
            f(&LedgerTx {
                keys,
                ledger,
                ledger_by_task,
            })
        });
        tx_outcome(what, result)
    }

    fn get_task_by_bytes(&self, id: &[u8]) -> Result<Option<Task>, StoreError> {
        match self.tasks.get(id) {
            Ok(Some(bytes)) => decode(TASKS, &bytes).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(backend("read task", e)),
        }
    }

    /// Tasks named by index keys, skipping (with a warning) entries whose task is gone (a
    /// concurrent delete between the index read and the task read).
    fn tasks_for(
        &self,
        index: &'static str,
        ids: impl IntoIterator<Item = Vec<u8>>,
    ) -> Result<Vec<Task>, StoreError> {
        let mut out = Vec::new();
        for id in ids {
            match self.get_task_by_bytes(&id)? {
                Some(task) => out.push(task),
                None => tracing::warn!(
                    index,
                    task = %String::from_utf8_lossy(&id),
                    "index entry without a task, skipped"
                ),
            }
        }
        Ok(out)
    }

    /// Ids of one owner's tasks of one kind, in `order`, strictly past `after` (compared by
    /// id), at most `n`.
    fn owner_ids(
        &self,
        owner: &str,
        kind: TaskKind,
        after: Option<&str>,
        order: Order,
        n: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let prefix = owner_prefix(owner, kind);
        let mut upper = prefix.clone();
        // The prefix ends in `\0`; bumping it bounds the range to this owner and kind.
        if let Some(last) = upper.last_mut() {
            *last = 1;
        }
        let cursor = after.map(|a| [prefix.as_slice(), a.as_bytes()].concat());
        let (lo, hi) = match (order, cursor) {
            (Order::Desc, Some(c)) => (Bound::Included(prefix.clone()), Bound::Excluded(c)),
            (Order::Asc, Some(c)) => (Bound::Excluded(c), Bound::Excluded(upper)),
            (_, None) => (Bound::Included(prefix.clone()), Bound::Excluded(upper)),
        };
        if range_is_empty(&lo, &hi) {
            return Ok(Vec::new());
        }
        let range = self.tasks_by_owner.range::<Vec<u8>, _>((lo, hi));
        let keys: Box<dyn Iterator<Item = sled::Result<(IVec, IVec)>>> = match order {
            Order::Desc => Box::new(range.rev()),
            Order::Asc => Box::new(range),
        };
        let mut out = Vec::new();
        for item in keys.take(n) {
            let (k, _) = item.map_err(|e| backend("list tasks", e))?;
            out.push(k[prefix.len()..].to_vec());
        }
        Ok(out)
    }
}

impl Store for SledStore {
    fn create_task(&self, task: &Task, ledger: &[LedgerDraft]) -> Result<(), StoreError> {
        check_id("task id", &task.id)?;
        check_id("task owner", &task.owner)?;
        let mut task = task.clone();
        if task.status.is_final() {
            task.next_poll_ms = None;
        }
        let bytes = encode("task", &task)?;
        let at = unix_secs();
        let what = format!("create task {}", task.id);
        self.tx(&what, |tx| {
            if tx.tasks.get(task.id.as_bytes())?.is_some() {
                return abort(StoreError::Backend(format!(
                    "task {} already exists",
                    task.id
                )));
            }
            tx.tasks.insert(task.id.as_bytes(), bytes.as_slice())?;
            tx.tasks_by_owner
                .insert(owner_key(&task.owner, task.kind, &task.id), &[][..])?;
            if let Some(due) = due_key(&task) {
                tx.due.insert(due, &[][..])?;
            }
            apply_ledger(&tx.ledger(), ledger, at)
        })?;
        self.flush_after(&what)
    }

    fn task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        self.get_task_by_bytes(id.as_bytes())
    }

    fn list_tasks(&self, query: &TaskQuery) -> Result<Page<Task>, StoreError> {
        let limit = query.limit.clamp(1, MAX_PAGE);
        let after = query.after.as_deref();
        let ids = match query.kind {
            Some(kind) => self.owner_ids(&query.owner, kind, after, query.order, limit + 1)?,
            None => {
                // Ids of the two kinds have different prefixes: merge them by their ULID part.
                let mut ids = Vec::new();
                for kind in [TaskKind::Video, TaskKind::Generation] {
                    let all = self.owner_ids(&query.owner, kind, None, query.order, usize::MAX)?;
                    ids.extend(
                        all.into_iter()
                            .filter(|id| match after {
                                None => true,
                                Some(a) => {
                                    let (id, a) = (sort_key(id), sort_key(a.as_bytes()));
                                    match query.order {
                                        Order::Desc => id < a,
                                        Order::Asc => id > a,
                                    }
                                }
                            })
                            .take(limit + 1),
                    );
                }
                match query.order {
                    Order::Desc => ids.sort_by(|a, b| sort_key(b).cmp(&sort_key(a))),
                    Order::Asc => ids.sort_by(|a, b| sort_key(a).cmp(&sort_key(b))),
                }
                ids.truncate(limit + 1);
                ids
            }
        };
        let has_more = ids.len() > limit;
        let items = self.tasks_for(TASKS_BY_OWNER, ids.into_iter().take(limit))?;
        Ok(Page { items, has_more })
    }

    fn all_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        let mut ids = Vec::new();
        for key in self.tasks.iter().keys() {
            ids.push(key.map_err(|e| backend("list all tasks", e))?.to_vec());
        }
        ids.sort_by(|a, b| sort_key(b).cmp(&sort_key(a)));
        ids.truncate(limit);
        self.tasks_for(TASKS, ids)
    }

    fn transition(
        &self,
        id: &str,
        from: &[TaskStatus],
        to: TaskStatus,
        update: &dyn Fn(&mut Task),
        ledger: &[LedgerDraft],
    ) -> Result<Task, StoreError> {
        let at = unix_secs();
        let what = format!("transition task {id}");
        let task = self.tx(&what, |tx| {
            let Some(bytes) = tx.tasks.get(id.as_bytes())? else {
                return abort(StoreError::TaskNotFound(id.to_owned()));
            };
            let old: Task = decode(TASKS, &bytes).map_err(ConflictableTransactionError::Abort)?;
            if old.status.is_final() || !from.contains(&old.status) {
                return abort(StoreError::WrongStatus {
                    task_id: id.to_owned(),
                    expected: from.to_vec(),
                    actual: old.status,
                });
            }
            let mut new = old.clone();
            update(&mut new);
            // Identity fields key the indexes; an update cannot move a task.
            new.id.clone_from(&old.id);
            new.owner.clone_from(&old.owner);
            new.kind = old.kind;
            new.status = to;
            new.progress = new.progress.max(old.progress).min(100);
            if to.is_final() {
                new.next_poll_ms = None;
            }
            let old_due = due_key(&old);
            let new_due = due_key(&new);
            if old_due != new_due {
                if let Some(k) = old_due {
                    tx.due.remove(k)?;
                }
                if let Some(k) = new_due {
                    tx.due.insert(k, &[][..])?;
                }
            }
            let bytes = encode("task", &new).map_err(ConflictableTransactionError::Abort)?;
            tx.tasks.insert(id.as_bytes(), bytes)?;
            apply_ledger(&tx.ledger(), ledger, at)?;
            Ok(new)
        })?;
        self.flush_after(&what)?;
        Ok(task)
    }

    fn due_tasks(&self, now_ms: u64, limit: usize) -> Result<Vec<Task>, StoreError> {
        let mut ids = Vec::new();
        for key in self.due.iter().keys().take(limit) {
            let key = key.map_err(|e| backend("read due index", e))?;
            let (ms, id) = split_due_key(&key)?;
            if ms > now_ms {
                break;
            }
            ids.push(id.to_vec());
        }
        self.tasks_for(DUE, ids)
    }

    fn unfinished_tasks(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        let mut ids = Vec::new();
        for key in self.due.iter().keys().take(limit) {
            let key = key.map_err(|e| backend("read due index", e))?;
            let (_, id) = split_due_key(&key)?;
            ids.push(id.to_vec());
        }
        self.tasks_for(DUE, ids)
    }

    fn delete_task(&self, id: &str) -> Result<Option<Task>, StoreError> {
        let what = format!("delete task {id}");
        let removed = self.tx(&what, |tx| {
            let Some(bytes) = tx.tasks.remove(id.as_bytes())? else {
                return Ok(None);
            };
            let task: Task = decode(TASKS, &bytes).map_err(ConflictableTransactionError::Abort)?;
            tx.tasks_by_owner
                .remove(owner_key(&task.owner, task.kind, &task.id))?;
            if let Some(k) = due_key(&task) {
                tx.due.remove(k)?;
            }
            Ok(Some(task))
        })?;
        if removed.is_some() {
            self.flush_after(&what)?;
        }
        Ok(removed)
    }

    fn create_key(&self, key: &Key) -> Result<(), StoreError> {
        check_id("key id", &key.id)?;
        let bytes = encode("key", key)?;
        let what = format!("create key {}", key.id);
        self.tx(&what, |tx| {
            if tx.keys.get(key.id.as_bytes())?.is_some() {
                return abort(StoreError::Backend(format!(
                    "key {} already exists",
                    key.id
                )));
            }
            if tx.keys_by_hash.get(key.hash.as_bytes())?.is_some() {
                return abort(StoreError::DuplicateKey);
            }
            tx.keys.insert(key.id.as_bytes(), bytes.as_slice())?;
            tx.keys_by_hash
                .insert(key.hash.as_bytes(), key.id.as_bytes())?;
            Ok(())
        })?;
        self.flush_after(&what)
    }

    fn key(&self, id: &str) -> Result<Option<Key>, StoreError> {
        match self.keys.get(id.as_bytes()) {
            Ok(Some(bytes)) => decode(KEYS, &bytes).map(Some),
            Ok(None) => Ok(None),
            Err(e) => Err(backend("read key", e)),
        }
    }

    fn key_by_hash(&self, hash: &str) -> Result<Option<Key>, StoreError> {
        let id = self
            .keys_by_hash
            .get(hash.as_bytes())
            .map_err(|e| backend("read key hash index", e))?;
        let Some(id) = id else { return Ok(None) };
        match self.keys.get(&id) {
            Ok(Some(bytes)) => decode(KEYS, &bytes).map(Some),
            Ok(None) => {
                tracing::warn!(key = %String::from_utf8_lossy(&id), "hash index entry without a key");
                Ok(None)
            }
            Err(e) => Err(backend("read key", e)),
        }
    }

    fn keys(&self) -> Result<Vec<Key>, StoreError> {
        let mut out = Vec::new();
        for item in self.keys.iter().values() {
            let bytes = item.map_err(|e| backend("list keys", e))?;
            out.push(decode(KEYS, &bytes)?);
        }
        Ok(out)
    }

    fn key_count(&self) -> Result<usize, StoreError> {
        Ok(self.keys.len())
    }

    fn update_key(&self, id: &str, update: &dyn Fn(&mut Key)) -> Result<Key, StoreError> {
        let what = format!("update key {id}");
        let key = self.tx(&what, |tx| {
            let Some(bytes) = tx.keys.get(id.as_bytes())? else {
                return abort(StoreError::KeyNotFound(id.to_owned()));
            };
            let old: Key = decode(KEYS, &bytes).map_err(ConflictableTransactionError::Abort)?;
            let mut new = old.clone();
            update(&mut new);
            new.id.clone_from(&old.id);
            if new.hash != old.hash {
                if tx.keys_by_hash.get(new.hash.as_bytes())?.is_some() {
                    return abort(StoreError::DuplicateKey);
                }
                tx.keys_by_hash.remove(old.hash.as_bytes())?;
                tx.keys_by_hash
                    .insert(new.hash.as_bytes(), new.id.as_bytes())?;
            }
            let bytes = encode("key", &new).map_err(ConflictableTransactionError::Abort)?;
            tx.keys.insert(id.as_bytes(), bytes)?;
            Ok(new)
        })?;
        self.flush_after(&what)?;
        Ok(key)
    }

    fn charges(&self, charges: &[Charge]) -> Result<Vec<i64>, StoreError> {
        let at = unix_secs();
        self.ledger_tx("charges", |tx| {
            // Each key is read and written once, however many of its charges the batch holds.
            let mut keys: HashMap<&str, Key> = HashMap::new();
            let mut taken = Vec::with_capacity(charges.len());
            for charge in charges {
                let by_task = by_task_key(&charge.task_id, LedgerKind::Charge);
                if check_id("charge id", &charge.task_id).is_err()
                    || tx.ledger_by_task.get(by_task.as_slice())?.is_some()
                {
                    taken.push(0);
                    continue;
                }
                let key = match keys.entry(charge.key_id.as_str()) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => match tx.keys.get(charge.key_id.as_bytes())? {
                        Some(bytes) => e.insert(
                            decode(KEYS, &bytes).map_err(ConflictableTransactionError::Abort)?,
                        ),
                        None => {
                            taken.push(0);
                            continue;
                        }
                    },
                };
                let take = match key.quota {
                    Some(remaining) => charge.amount.clamp(0, remaining.max(0)),
                    None => charge.amount.max(0),
                };
                key.quota = key.quota.map(|q| q - take);
                key.quota_used = key.quota_used.saturating_add(take);
                let draft = LedgerDraft {
                    key_id: charge.key_id.clone(),
                    task_id: charge.task_id.clone(),
                    kind: LedgerKind::Charge,
                    amount: -take,
                };
                write_entry(tx, &draft, by_task, key.quota, at)?;
                taken.push(take);
            }
            for (id, key) in &keys {
                let bytes = encode("key", key).map_err(ConflictableTransactionError::Abort)?;
                tx.keys.insert(id.as_bytes(), bytes)?;
            }
            Ok(taken)
        })
    }

    fn ledger(&self, key_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let mut prefix = key_id.as_bytes().to_vec();
        prefix.push(0);
        let mut out = Vec::new();
        for item in self.ledger.scan_prefix(prefix).values() {
            let bytes = item.map_err(|e| backend("read ledger", e))?;
            out.push(decode(LEDGER, &bytes)?);
        }
        Ok(out)
    }

    fn meta(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.meta
            .get(name.as_bytes())
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| backend(&format!("read meta {name}"), e))
    }

    fn meta_init(&self, name: &str, value: &[u8]) -> Result<Vec<u8>, StoreError> {
        let what = format!("init meta {name}");
        let cas = self
            .meta
            .compare_and_swap(name.as_bytes(), None::<&[u8]>, Some(value))
            .map_err(|e| backend(&what, e))?;
        match cas {
            Ok(()) => {
                self.flush_after(&what)?;
                Ok(value.to_vec())
            }
            Err(e) => match e.current {
                Some(current) => Ok(current.to_vec()),
                // The meta tree is never removed from; a CAS from "absent" fails only when a
                // value is there.
                None => Err(StoreError::Backend(format!(
                    "{what}: compare-and-swap failed without a current value"
                ))),
            },
        }
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.flush_after("flush")
    }

    fn create_library(&self, library: &Library) -> Result<(), StoreError> {
        self.assets.create_library(library)?;
        self.flush_after(&format!("create library {}", library.id))
    }

    fn library(&self, id: &str) -> Result<Option<Library>, StoreError> {
        self.assets.library(id)
    }

    fn list_libraries(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Page<Library>, StoreError> {
        self.assets.list_libraries(owner, after, limit, order)
    }

    fn delete_library(&self, id: &str) -> Result<Option<(Library, Vec<AssetRecord>)>, StoreError> {
        let removed = self.assets.delete_library(id)?;
        if removed.is_some() {
            self.flush_after(&format!("delete library {id}"))?;
        }
        Ok(removed)
    }

    fn create_asset(&self, asset: &AssetRecord) -> Result<(), StoreError> {
        self.assets.create_asset(asset)?;
        self.flush_after(&format!("create asset {}", asset.id))
    }

    fn asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        self.assets.asset(id)
    }

    fn list_assets(&self, query: &AssetQuery) -> Result<Page<AssetRecord>, StoreError> {
        self.assets.list_assets(query)
    }

    fn transition_asset(
        &self,
        id: &str,
        from: &[AssetStatus],
        to: AssetStatus,
        update: &dyn Fn(&mut AssetRecord),
    ) -> Result<AssetRecord, StoreError> {
        let asset = self.assets.transition_asset(id, from, to, update)?;
        self.flush_after(&format!("transition asset {id}"))?;
        Ok(asset)
    }

    fn expired_assets(&self, now_secs: u64, limit: usize) -> Result<Vec<AssetRecord>, StoreError> {
        self.assets.expired_assets(now_secs, limit)
    }

    fn processing_assets(&self, limit: usize) -> Result<Vec<AssetRecord>, StoreError> {
        self.assets.processing_assets(limit)
    }

    fn delete_asset(&self, id: &str) -> Result<Option<AssetRecord>, StoreError> {
        let removed = self.assets.delete_asset(id)?;
        if removed.is_some() {
            self.flush_after(&format!("delete asset {id}"))?;
        }
        Ok(removed)
    }
}

/// Applies ledger drafts inside a transaction: checks `(task_id, kind)` uniqueness, moves the
/// key's quota, writes the entries.
fn apply_ledger(tx: &LedgerTx<'_>, drafts: &[LedgerDraft], at: u64) -> TxResult<()> {
    for draft in drafts {
        let by_task = by_task_key(&draft.task_id, draft.kind);
        if tx.ledger_by_task.get(by_task.as_slice())?.is_some() {
            return abort(StoreError::DuplicateLedger {
                task_id: draft.task_id.clone(),
                kind: draft.kind,
            });
        }
        let Some(bytes) = tx.keys.get(draft.key_id.as_bytes())? else {
            return abort(StoreError::KeyNotFound(draft.key_id.clone()));
        };
        let mut key: Key = decode(KEYS, &bytes).map_err(ConflictableTransactionError::Abort)?;
        let overflow = || {
            ConflictableTransactionError::Abort(StoreError::Backend(format!(
                "ledger {} on key {}: amount {} overflows the quota",
                draft.kind.as_str(),
                draft.key_id,
                draft.amount
            )))
        };
        let balance_after = match key.quota {
            Some(remaining) => {
                let after = remaining.checked_add(draft.amount).ok_or_else(overflow)?;
                if draft.amount < 0 && after < 0 {
                    return abort(StoreError::InsufficientQuota {
                        key_id: draft.key_id.clone(),
                        needed: draft.amount.saturating_neg(),
                        remaining,
                    });
                }
                Some(after)
            }
            None => None,
        };
        key.quota = balance_after;
        key.quota_used = key
            .quota_used
            .checked_sub(draft.amount)
            .ok_or_else(overflow)?;
        let key_bytes = encode("key", &key).map_err(ConflictableTransactionError::Abort)?;
        tx.keys.insert(draft.key_id.as_bytes(), key_bytes)?;

        write_entry(tx, draft, by_task, balance_after, at)?;
    }
    Ok(())
}

/// The `ledger_by_task` key of a task's entry of one kind.
fn by_task_key(task_id: &str, kind: LedgerKind) -> Vec<u8> {
    [task_id.as_bytes(), &[0], kind.as_str().as_bytes()].concat()
}

/// Writes one ledger entry and its `ledger_by_task` index entry (the key record is the
/// caller's).
fn write_entry(
    tx: &LedgerTx<'_>,
    draft: &LedgerDraft,
    by_task: Vec<u8>,
    balance_after: Option<i64>,
    at: u64,
) -> TxResult<()> {
    let entry = LedgerEntry {
        id: format!("led_{}", ulid::Ulid::new()),
        key_id: draft.key_id.clone(),
        task_id: draft.task_id.clone(),
        kind: draft.kind,
        amount: draft.amount,
        balance_after,
        at,
    };
    let seq = tx.ledger.generate_id()?;
    let ledger_key = [draft.key_id.as_bytes(), &[0], seq.to_be_bytes().as_slice()].concat();
    let entry_bytes =
        encode("ledger entry", &entry).map_err(ConflictableTransactionError::Abort)?;
    tx.ledger.insert(ledger_key, entry_bytes)?;
    tx.ledger_by_task.insert(by_task, entry.id.as_bytes())?;
    Ok(())
}

/// A transaction's outcome as the store's: its own abort, or sled's error.
fn tx_outcome<A>(
    what: &str,
    result: Result<A, TransactionError<StoreError>>,
) -> Result<A, StoreError> {
    match result {
        Ok(a) => Ok(a),
        Err(TransactionError::Abort(e)) => Err(e),
        Err(TransactionError::Storage(e)) => Err(backend(what, e)),
    }
}

fn backend(what: &str, e: sled::Error) -> StoreError {
    StoreError::Backend(format!("{what}: {e}"))
}

fn decode<T: DeserializeOwned>(tree: &'static str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Corrupt { tree, source })
}

fn encode<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Backend(format!("encode {what}: {e}")))
}

fn corrupt(tree: &'static str, msg: &str) -> StoreError {
    StoreError::Corrupt {
        tree,
        source: <serde_json::Error as serde::de::Error>::custom(msg),
    }
}

/// Ids are parts of index keys separated by NUL; an empty one would make prefixes ambiguous.
fn check_id(what: &str, id: &str) -> Result<(), StoreError> {
    if id.is_empty() || id.contains('\0') {
        return Err(StoreError::Backend(format!(
            "{what} {id:?} is empty or contains NUL"
        )));
    }
    Ok(())
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const fn kind_byte(kind: TaskKind) -> u8 {
    match kind {
        TaskKind::Video => b'v',
        TaskKind::Generation => b'g',
    }
}

fn owner_prefix(owner: &str, kind: TaskKind) -> Vec<u8> {
    [owner.as_bytes(), &[0, kind_byte(kind), 0]].concat()
}

fn owner_key(owner: &str, kind: TaskKind, id: &str) -> Vec<u8> {
    [owner_prefix(owner, kind).as_slice(), id.as_bytes()].concat()
}

/// The task's `due` index key: none once final; `u64::MAX` for an unfinished task without a
/// poll time (found by `unfinished_tasks`, never due).
fn due_key(task: &Task) -> Option<Vec<u8>> {
    if task.status.is_final() {
        return None;
    }
    let ms = task.next_poll_ms.unwrap_or(u64::MAX);
    Some([ms.to_be_bytes().as_slice(), task.id.as_bytes()].concat())
}

fn split_due_key(key: &[u8]) -> Result<(u64, &[u8]), StoreError> {
    match key.split_first_chunk::<8>() {
        Some((ms, id)) if !id.is_empty() => Ok((u64::from_be_bytes(*ms), id)),
        _ => Err(corrupt(DUE, "due index key shorter than 9 bytes")),
    }
}

/// Creation-time order of ids of any kind: `prefix_<ULID>` compared by the ULID, then by the
/// whole id.
fn sort_key(id: &[u8]) -> (&[u8], &[u8]) {
    let ulid = match id.iter().rposition(|&b| b == b'_') {
        Some(i) => &id[i + 1..],
        None => id,
    };
    (ulid, id)
}

fn range_is_empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(l), Bound::Excluded(h)) => l >= h,
        (Bound::Excluded(l), Bound::Excluded(h)) => l >= h,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
