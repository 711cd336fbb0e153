//! [`SledStore`] itself: the database and its trees, opening them, the two transactions a
//! business step runs in (over every tree but `meta` and the asset trees, or over the trees of
//! a batch of charges) and the flush after a step.

use std::path::Path;
use std::sync::Arc;

use sled::transaction::TransactionalTree;
use sled::{Db, Tree};

use super::assets::AssetTrees;
use super::counts::TaskCounts;
use super::flush::{GroupFlush, Handed};
use super::record::open_tree;
use super::txn::{TxResult, run, tree_set};
use super::usage_log::{self, UsageLog};
use crate::StoreError;

pub(super) const TASKS: &str = "tasks";
pub(super) const TASKS_BY_OWNER: &str = "tasks_by_owner";
pub(super) const DUE: &str = "due";
pub(super) const KEYS: &str = "keys";
const KEYS_BY_HASH: &str = "keys_by_hash";
pub(super) const LEDGER: &str = "ledger";
const LEDGER_BY_TASK: &str = "ledger_by_task";
pub(super) const USAGE: &str = "usage";
const USAGE_BY_KEY: &str = "usage_by_key";
const META: &str = "meta";
pub(super) const CHARACTERS: &str = "characters";
const CHARACTERS_BY_OWNER: &str = "characters_by_owner";
const CHARACTER_COUNTS: &str = "character_counts";
pub(super) const WEBHOOKS: &str = "webhooks";
pub(super) const WEBHOOKS_DUE: &str = "webhooks_due";
const WEBHOOKS_BY_TASK: &str = "webhooks_by_task";
pub(super) const IDEMPOTENCY: &str = "idempotency";
pub(super) const IDEMPOTENCY_BY_TIME: &str = "idempotency_by_time";

pub(super) const BATCHES: &str = "batches";
const BATCHES_BY_OWNER: &str = "batches_by_owner";
pub(super) const BATCH_ITEMS: &str = "batch_items";
const BATCHES_OPEN: &str = "batches_open";

/// The trees of message batches.
#[derive(Clone)]
pub(super) struct BatchTrees {
    pub(super) batches: Tree,
    pub(super) by_owner: Tree,
    pub(super) items: Tree,
    pub(super) open: Tree,
}

impl BatchTrees {
    pub(super) fn open(db: &Db) -> Result<BatchTrees, StoreError> {
        Ok(BatchTrees {
            batches: open_tree(db, BATCHES)?,
            by_owner: open_tree(db, BATCHES_BY_OWNER)?,
            items: open_tree(db, BATCH_ITEMS)?,
            open: open_tree(db, BATCHES_OPEN)?,
        })
    }
}

/// The page cache [`SledStore::open`] asks for (sled's own default is 1 GiB).
pub(super) const DEFAULT_CACHE_BYTES: u64 = 16 << 20;

/// A task step handed to the group commit, which writes it with the others of its flush in
/// one transaction.
pub(super) enum Write {
    Create(Creation),
    Move(Move),
}

/// A task's creation: the task as written, its record and its ledger drafts (the
/// pre-deduction), stamped `at`; and the `Idempotency-Key` claim it completes with its
/// answer, if it was made under one.
pub(super) struct Creation {
    pub(super) task: Box<crate::Task>,
    pub(super) bytes: Vec<u8>,
    pub(super) ledger: Vec<crate::LedgerDraft>,
    pub(super) at: u64,
    pub(super) claim: Option<Box<(crate::IdemTicket, crate::IdemAnswer)>>,
}

/// A task's move, computed from its record as it was read (`from`): written only while that
/// record is still the task's, else not at all (the caller reads it again and computes the
/// move anew).
pub(super) struct Move {
    pub(super) id: String,
    pub(super) from: sled::IVec,
    /// The new record.
    pub(super) bytes: Vec<u8>,
    pub(super) kind: crate::TaskKind,
    pub(super) was: crate::TaskStatus,
    pub(super) to: crate::TaskStatus,
    /// The `due` entries before and after.
    pub(super) due: (Option<Vec<u8>>, Option<Vec<u8>>),
    /// The webhook of a task's end.
    pub(super) webhook: Option<Box<crate::Webhook>>,
    pub(super) ledger: Vec<crate::LedgerDraft>,
    pub(super) at: u64,
}

/// The embedded store: a sled database in one directory.
#[derive(Clone)]
pub struct SledStore {
    db: Db,
    pub(super) trees: Trees,
    pub(super) meta: Tree,
    /// Characters by id, each written once (outside the task steps' transactions).
    pub(super) characters: Tree,
    /// `owner \0 character id` of every character.
    pub(super) characters_by_owner: Tree,
    /// Each owner's number of characters (8 bytes big-endian), changed in the transaction of
    /// every creation and deletion.
    pub(super) character_counts: Tree,
    /// The usage log's committed end (under [`usage_log::END`]), and the chunks of charge
    /// entries stored here before the log had a file of its own, by sequence number.
    pub(super) usage: Tree,
    /// `key_id \0 seq` for each run of chunks of the usage log holding the key's entries (the
    /// first chunk's `seq`), with each chunk's sequence number and place in the file
    /// ([`usage_log::RUN_CHUNKS`] at the most); earlier versions wrote one entry per chunk,
    /// with its place alone, or empty for a chunk in `usage`.
    pub(super) usage_by_key: Tree,
    /// The usage log's file.
    pub(super) usage_log: Arc<UsageLog>,
    pub(super) assets: AssetTrees,
    pub(super) batches: BatchTrees,
    /// The group commit; task creations and moves are handed to it ([`Write`]).
    pub(super) flusher: Arc<GroupFlush<Write, SledStore>>,
    /// Tasks read by id lately, decoded, with the bytes they were decoded from.
    pub(super) recent: Arc<RecentTasks>,
    /// Tasks by kind and status.
    pub(super) counts: Arc<TaskCounts>,
}

/// The most tasks [`RecentTasks`] keeps; past it, it starts afresh.
const RECENT_TASKS: usize = 1024;

/// A task read by id is decoded from its JSON record, which costs more than the rest of a
/// status poll: the tasks read lately are kept decoded and served again, without a read of
/// the store, until a step writes them. Every step that writes a task says so
/// ([`RecentTasks::written`]) once its transaction has committed; a task decoded from a read
/// that a write may have overtaken is not kept.
#[derive(Default)]
pub(super) struct RecentTasks {
    state: std::sync::Mutex<Recent>,
}

#[derive(Default)]
struct Recent {
    /// Keyed by ids the relay made: a fast hash (keyed per process) is enough.
    tasks: foldhash::HashMap<String, Arc<crate::Task>>,
    /// Steps that wrote tasks so far: a read keeps what it decoded only if none came between
    /// its start and its end.
    writes: u64,
}

impl RecentTasks {
    fn state(&self) -> std::sync::MutexGuard<'_, Recent> {
        super::locked::locked(&self.state)
    }

    /// Task `id` as kept, or (when it is not kept) the count of writes to give
    /// [`RecentTasks::put`] after reading it.
    pub(super) fn get(&self, id: &str) -> Result<Arc<crate::Task>, u64> {
        let state = self.state();
        state.tasks.get(id).map(Arc::clone).ok_or(state.writes)
    }

    /// Keeps `task`, read after [`RecentTasks::get`] gave `writes`, unless a step has written
    /// tasks since.
    pub(super) fn put(&self, id: &str, task: &Arc<crate::Task>, writes: u64) {
        let mut state = self.state();
        if state.writes != writes {
            return;
        }
        if state.tasks.len() >= RECENT_TASKS && !state.tasks.contains_key(id) {
            state.tasks.clear();
        }
        state.tasks.insert(id.to_owned(), Arc::clone(task));
    }

    /// A step's transaction that wrote the tasks `ids` has committed: they are read again.
    pub(super) fn written<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut state = self.state();
        state.writes += 1;
        for id in ids {
            state.tasks.remove(id);
        }
    }
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore").finish_non_exhaustive()
    }
}

tree_set! {
    /// The trees of tasks, keys and the ledger: a business step but an asset one runs as one
    /// transaction over them all.
    pub(super) struct Trees / Tx {
        tasks: TASKS,
        tasks_by_owner: TASKS_BY_OWNER,
        due: DUE,
        keys: KEYS,
        keys_by_hash: KEYS_BY_HASH,
        ledger: LEDGER,
        ledger_by_task: LEDGER_BY_TASK,
        webhooks: WEBHOOKS,
        webhooks_due: WEBHOOKS_DUE,
        webhooks_by_task: WEBHOOKS_BY_TASK,
        idempotency: IDEMPOTENCY,
        idempotency_by_time: IDEMPOTENCY_BY_TIME,
    }
}

/// The trees a batch of charges touches: the keys and the usage log
/// (`usage`: the charges' entries in chunks under an increasing sequence number;
/// `usage_by_key`: which chunks hold a key's entries).
pub(super) struct ChargeTx<'a> {
    pub(super) keys: &'a TransactionalTree,
    pub(super) usage: &'a TransactionalTree,
    pub(super) usage_by_key: &'a TransactionalTree,
}

/// The trees a ledger entry touches.
pub(super) struct LedgerTx<'a> {
    pub(super) keys: &'a TransactionalTree,
    pub(super) ledger: &'a TransactionalTree,
    pub(super) ledger_by_task: &'a TransactionalTree,
}

impl<'a> Tx<'a> {
    pub(super) fn ledger(&self) -> LedgerTx<'a> {
        LedgerTx {
            keys: self.keys,
            ledger: self.ledger,
            ledger_by_task: self.ledger_by_task,
        }
    }
}

impl SledStore {
    /// Opens (or creates) the database in `dir`, caching at most about `cache_bytes` of its
    /// pages in memory; the group commit writes the steps handed to it with `commit`.
    pub(super) fn open_with(
        dir: &Path,
        cache_bytes: u64,
        commit: fn(&SledStore, Vec<Handed<Write>>),
    ) -> Result<SledStore, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes.max(1 << 20))
            .open()
            .map_err(|e| StoreError::Backend(format!("open database in {}: {e}", dir.display())))?;
        let trees = Trees::open(&db)?;
        let counts = Arc::new(TaskCounts::open(&db, &trees.tasks)?);
        let usage = open_tree(&db, USAGE)?;
        let committed = match usage.get(usage_log::END) {
            Ok(Some(end)) => <[u8; 8]>::try_from(end.as_ref()).map_or(0, u64::from_be_bytes),
            Ok(None) => 0,
            Err(e) => return Err(StoreError::Backend(format!("read usage log end: {e}"))),
        };
        let usage_log = Arc::new(UsageLog::open(dir, committed)?);
        let flusher = Arc::new(GroupFlush::new(commit, SledStore::sync));
        let store = SledStore {
            trees,
            counts,
            meta: open_tree(&db, META)?,
            characters: open_tree(&db, CHARACTERS)?,
            characters_by_owner: open_tree(&db, CHARACTERS_BY_OWNER)?,
            character_counts: open_tree(&db, CHARACTER_COUNTS)?,
            usage,
            usage_by_key: open_tree(&db, USAGE_BY_KEY)?,
            usage_log,
            assets: AssetTrees::open(&db)?,
            batches: BatchTrees::open(&db)?,
            flusher,
            recent: Arc::default(),
            db,
        };
        tracing::debug!(
            tasks = store.trees.tasks.len(),
            keys = store.trees.keys.len(),
            "store opened"
        );
        Ok(store)
    }

    /// Runs `f` as one transaction over the trees of charges only.
    pub(super) fn charge_tx<A>(
        &self,
        what: &str,
        f: impl Fn(&ChargeTx<'_>) -> TxResult<A>,
    ) -> Result<A, StoreError> {
        run(
            what,
            &(&self.trees.keys, &self.usage, &self.usage_by_key),
            |(keys, usage, usage_by_key)| {
                f(&ChargeTx {
                    keys,
                    usage,
                    usage_by_key,
                })
            },
        )
    }

    /// Leaves the task counts for the next opening ([`TaskCounts::open`]); for a clean stop.
    pub(super) fn leave_counts(&self) -> Result<(), StoreError> {
        self.counts.leave(&self.db)
    }

    /// Makes everything written so far durable, sharing a flush with concurrent callers;
    /// `what` names the step in an error. The disk sync runs on a blocking thread, never on
    /// the caller's async worker.
    pub(super) async fn flush_after(&self, what: &str) -> Result<(), StoreError> {
        self.flusher
            .flush(self)
            .await
            .map_err(|e| StoreError::Backend(format!("{what}: flush: {e}")))
    }

    /// Puts the usage log's file and then the database on disk (the file first: the
    /// database's committed end of the log never runs ahead of the file on disk); the group
    /// commit's sync, on its blocking thread.
    fn sync(&self) -> Result<(), String> {
        self.usage_log
            .sync()
            .map_err(|e| format!("usage log: {e}"))?;
        self.db.flush().map(drop).map_err(|e| e.to_string())
    }
}
