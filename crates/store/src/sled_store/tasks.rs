//! The task steps: creation and the compare-and-swap transition (each put together with its
//! ledger entries by the caller, in one transaction), deletion, and the reads: by id, one
//! owner's pages, all tasks for operators, claiming due tasks and the unfinished ones from the
//! `due` index.

use std::sync::Arc;

use sled::transaction::ConflictableTransactionError;

use super::flush::Handed;
use super::idempotency;
use super::index::{children, move_entry};
use super::ledger;
use super::record::{backend, check_id, decode, encode, read};
use super::task_index::{due_key, owner_key, owner_prefix, sort_key, split_due_key};
use super::trees::{Creation, DUE, Move, SledStore, TASKS, TASKS_BY_OWNER, Tx, Write};
use super::txn::{TxResult, ensure_new, get, or_abort, put};
use super::webhooks;
use crate::steps::TaskUpdate;
use crate::{
    AdminTaskQuery, Claim, Order, Page, StoreError, Task, TaskKind, TaskQuery, TaskStatus,
};

/// Largest page `list_tasks` returns.
const MAX_PAGE: usize = 100;
/// Largest page `admin_tasks` returns.
const MAX_ADMIN_PAGE: usize = 1000;

/// A new task as it is written: its ids checked (they are parts of index keys), without a
/// poll time when it is final; and its record.
pub(super) fn new_record(task: &Task) -> Result<(Task, Vec<u8>), StoreError> {
    check_id("task id", &task.id)?;
    check_id("task owner", &task.owner)?;
    let mut task = task.clone();
    if task.status.is_final() {
        task.next_poll_ms = None;
    }
    let bytes = encode("task", &task)?;
    Ok((task, bytes))
}

/// Writes a new task and its index entries, its id checked unused; only sled can fail here.
fn write_new(tx: &Tx<'_>, task: &Task, bytes: &[u8]) -> TxResult<()> {
    tx.tasks.insert(task.id.as_bytes(), bytes)?;
    tx.tasks_by_owner
        .insert(owner_key(&task.owner, task.kind, &task.id), &[][..])?;
    if let Some(due) = due_key(task) {
        tx.due.insert(due, &[][..])?;
    }
    Ok(())
}

/// The task steps handed to the group commit for one flush:
/// creations and moves, in one transaction. Each one is checked before any of it is written
/// (a creation's id unused, a move's record unchanged since it was computed, the ledger drafts
/// covered), so one that fails (a quota too small, say) is answered with its error and leaves
/// nothing behind while the others are written; a failure of sled itself fails them all.
pub(super) fn commit(store: &SledStore, writes: Vec<Handed<Write>>) {
    let outcomes = store.trees.tx("write tasks", |tx| {
        let mut outcomes = Vec::with_capacity(writes.len());
        for handed in &writes {
            let outcome = match &handed.write {
                Write::Create(creation) => create(tx, creation)?,
                Write::Move(step) => move_to(tx, step)?,
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    });
    let outcomes = match outcomes {
        Ok(outcomes) => outcomes,
        Err(e) => {
            let text = match e {
                StoreError::Backend(text) => text,
                other => other.to_string(),
            };
            for handed in writes {
                handed.answer(Err(StoreError::Backend(text.clone())));
            }
            return;
        }
    };
    store.recent.written(writes.iter().map(|h| match &h.write {
        Write::Create(c) => c.task.id.as_str(),
        Write::Move(m) => m.id.as_str(),
    }));
    for (handed, outcome) in writes.into_iter().zip(outcomes) {
        if let Ok(true) = outcome {
            match &handed.write {
                Write::Create(Creation { task, .. }) => store.counts.add(task.kind, task.status),
                Write::Move(m) => store.counts.moved(m.kind, m.was, m.to),
            }
        }
        handed.answer(outcome);
    }
}

/// One creation of [`commit`]: its failure (an id in use, a ledger draft not covered, an
/// `Idempotency-Key` claim no longer its own) as its outcome, with nothing of it written.
fn create(tx: &Tx<'_>, creation: &Creation) -> TxResult<Result<bool, StoreError>> {
    let checked = ensure_new(tx.tasks, "task", &creation.task.id)
        .and_then(|()| ledger::prepare(&tx.ledger(), &creation.ledger, creation.at))
        .and_then(|prepared| {
            // The claim read while still the ticket's, with the answer it is completed with.
            let claim = creation
                .claim
                .as_deref()
                .map(|(ticket, answer)| {
                    idempotency::held(tx.idempotency, ticket).map(|held| (held, answer))
                })
                .transpose()?;
            Ok((prepared, claim))
        });
    let (prepared, claim) = match alone(checked)? {
        Ok(checked) => checked,
        Err(e) => return Ok(Err(e)),
    };
    write_new(tx, &creation.task, &creation.bytes)?;
    ledger::write(&tx.ledger(), prepared)?;
    if let Some((held, answer)) = claim {
        idempotency::write_answer(tx.idempotency, held, answer)?;
    }
    Ok(Ok(true))
}

/// A step's own abort as its outcome (the transaction goes on without it); sled's failure
/// as the transaction's.
fn alone<T>(checked: TxResult<T>) -> TxResult<Result<T, StoreError>> {
    match checked {
        Ok(value) => Ok(Ok(value)),
        Err(ConflictableTransactionError::Abort(e)) => Ok(Err(e)),
        Err(e) => Err(e),
    }
}

/// One move of [`commit`]: not written (`false`) when the task's record is no longer the one
/// it was computed from; a ledger draft's failure as its outcome, with nothing written.
fn move_to(tx: &Tx<'_>, step: &Move) -> TxResult<Result<bool, StoreError>> {
    if tx.tasks.get(step.id.as_bytes())?.as_ref() != Some(&step.from) {
        return Ok(Ok(false));
    }
    let prepared = match alone(ledger::prepare(&tx.ledger(), &step.ledger, step.at))? {
        Ok(prepared) => prepared,
        Err(e) => return Ok(Err(e)),
    };
    let (old_due, new_due) = &step.due;
    move_entry(tx.due, old_due.clone(), new_due.clone())?;
    tx.tasks.insert(step.id.as_bytes(), step.bytes.as_slice())?;
    if let Some(webhook) = &step.webhook {
        webhooks::insert(tx, webhook)?;
    }
    ledger::write(&tx.ledger(), prepared)?;
    Ok(Ok(true))
}

/// A task by id: from [`super::trees::RecentTasks`] when its record is what was decoded last
/// (shared, not copied).
pub(super) fn get_by_id(store: &SledStore, id: &str) -> Result<Option<Arc<Task>>, StoreError> {
    let writes = match store.recent.get(id) {
        Ok(task) => return Ok(Some(task)),
        Err(writes) => writes,
    };
    let Some(bytes) = record(store, id)? else {
        return Ok(None);
    };
    let task = Arc::new(decode::<Task>(TASKS, &bytes)?);
    store.recent.put(id, &task, writes);
    Ok(Some(task))
}

/// Task `id`'s record as stored.
fn record(store: &SledStore, id: &str) -> Result<Option<sled::IVec>, StoreError> {
    store
        .trees
        .tasks
        .get(id.as_bytes())
        .map_err(|e| backend("read task", e))
}

/// [`crate::Store::list_tasks`].
pub(super) fn list(store: &SledStore, query: &TaskQuery) -> Result<Page<Task>, StoreError> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let after = query.after.as_deref();
    let ids = match query.kind {
        Some(kind) => owner_ids(store, &query.owner, kind, after, query.order, limit + 1)?,
        None => {
            // Ids of the two kinds have different prefixes: merge them by their ULID part.
            let mut ids = Vec::new();
            for kind in [TaskKind::Video, TaskKind::Generation] {
                let all = owner_ids(store, &query.owner, kind, None, query.order, usize::MAX)?;
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
    let items = tasks_for(store, TASKS_BY_OWNER, ids.into_iter().take(limit))?;
    Ok(Page { items, has_more })
}

/// [`crate::Store::admin_tasks`]: every task id, newest first, then the tasks that match.
pub(super) fn admin(store: &SledStore, query: &AdminTaskQuery) -> Result<Page<Task>, StoreError> {
    let limit = query.limit.clamp(1, MAX_ADMIN_PAGE);
    let mut ids = Vec::new();
    for key in store.trees.tasks.iter().keys() {
        ids.push(key.map_err(|e| backend("list all tasks", e))?);
    }
    ids.sort_by(|a, b| sort_key(b).cmp(&sort_key(a)));
    let after = query.after.as_deref().map(|a| sort_key(a.as_bytes()).0);
    let mut items = Vec::new();
    let mut has_more = false;
    for id in ids {
        if after.is_some_and(|a| sort_key(&id).0 >= a) {
            continue;
        }
        let Some(task) = read::<Task>(&store.trees.tasks, TASKS, &id, "read task")? else {
            continue;
        };
        if !admin_matches(query, &task) {
            continue;
        }
        if items.len() == limit {
            has_more = true;
            break;
        }
        items.push(task);
    }
    Ok(Page { items, has_more })
}

/// Whether `task` passes the filters of `query` (not its cursor).
fn admin_matches(query: &AdminTaskQuery, task: &Task) -> bool {
    query.status.is_none_or(|s| task.status == s)
        && query.kind.is_none_or(|k| task.kind == k)
        && query.model.as_deref().is_none_or(|m| task.model == m)
        && query.owner.as_deref().is_none_or(|o| task.owner == o)
}

/// [`crate::Store::transition`]'s move of task `id`, computed from its record as stored now:
/// the compare (`from`), the update, the identity fields kept, the new `due` entry and the
/// webhook of a task's end; and the task after the move. Written by [`commit`] only while the
/// record is still the one read here.
pub(super) fn prepare_move(
    store: &SledStore,
    id: &str,
    from: &[TaskStatus],
    to: TaskStatus,
    update: TaskUpdate<'_>,
    ledger: &[crate::LedgerDraft],
) -> Result<(Move, Task), StoreError> {
    let Some(bytes) = record(store, id)? else {
        return Err(StoreError::TaskNotFound(id.to_owned()));
    };
    let old: Task = decode(TASKS, &bytes)?;
    if old.status.is_final() || !from.contains(&old.status) {
        return Err(StoreError::WrongStatus {
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
    let step = Move {
        id: id.to_owned(),
        from: bytes,
        bytes: encode("task", &new)?,
        kind: new.kind,
        was: old.status,
        to,
        due: (due_key(&old), due_key(&new)),
        webhook: crate::Webhook::for_final(&new, webhooks::now_ms()).map(Box::new),
        ledger: ledger.to_vec(),
        at: super::ledger::unix_secs(),
    };
    Ok((step, new))
}

/// [`crate::Store::claim_due`]: the due entries up to `limit`, each task's lease written in one
/// transaction of its own (a task ended or moved since the index read is skipped).
pub(super) fn claim(
    store: &SledStore,
    now_ms: u64,
    lease_ms: u64,
    limit: usize,
) -> Result<Vec<Claim>, StoreError> {
    let mut ids = Vec::new();
    for key in store.trees.due.iter().keys().take(limit) {
        let key = key.map_err(|e| backend("read due index", e))?;
        let (ms, id) = split_due_key(&key)?;
        if ms > now_ms {
            break;
        }
        ids.push(String::from_utf8_lossy(id).into_owned());
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let until = now_ms.saturating_add(lease_ms);
    // One transaction for the whole batch: each sled transaction writes out the log's
    // buffer before it begins (a disk write of its own), so a transaction per task cost the
    // engine a write per claimed task.
    let claimed = store.trees.tx("claim due tasks", |tx| {
        let mut claimed = Vec::with_capacity(ids.len());
        for id in &ids {
            let Some(old): Option<Task> = get(tx.tasks, TASKS, id.as_bytes())? else {
                continue;
            };
            if old.status.is_final() || old.next_poll_ms.is_none_or(|at| at > now_ms) {
                continue;
            }
            let mut new = old.clone();
            new.next_poll_ms = Some(until);
            move_entry(tx.due, due_key(&old), due_key(&new))?;
            put(tx.tasks, id.as_bytes(), "task", &new)?;
            claimed.extend(old.next_poll_ms.map(|due_ms| Claim { task: new, due_ms }));
        }
        Ok(claimed)
    })?;
    store
        .recent
        .written(claimed.iter().map(|c| c.task.id.as_str()));
    Ok(claimed)
}

/// [`crate::Store::unfinished_tasks`].
pub(super) fn unfinished(store: &SledStore, limit: usize) -> Result<Vec<Task>, StoreError> {
    let mut ids = Vec::new();
    for key in store.trees.due.iter().keys().take(limit) {
        let key = key.map_err(|e| backend("read due index", e))?;
        let (_, id) = split_due_key(&key)?;
        ids.push(id.to_vec());
    }
    tasks_for(store, DUE, ids)
}

/// [`crate::Store::delete_task`].
pub(super) fn delete(store: &SledStore, id: &str) -> Result<Option<Task>, StoreError> {
    let removed = store.trees.tx(&format!("delete task {id}"), |tx| {
        let Some(bytes) = tx.tasks.remove(id.as_bytes())? else {
            return Ok(None);
        };
        let task: Task = or_abort(decode(TASKS, &bytes))?;
        tx.tasks_by_owner
            .remove(owner_key(&task.owner, task.kind, &task.id))?;
        if let Some(k) = due_key(&task) {
            tx.due.remove(k)?;
        }
        Ok(Some(task))
    });
    store.recent.written([id]);
    removed
}

/// Tasks named by index keys, skipping (with a warning) entries whose task is gone (a
/// concurrent delete between the index read and the task read).
fn tasks_for(
    store: &SledStore,
    index: &'static str,
    ids: impl IntoIterator<Item = Vec<u8>>,
) -> Result<Vec<Task>, StoreError> {
    let mut out = Vec::new();
    for id in ids {
        match read(&store.trees.tasks, TASKS, &id, "read task")? {
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

/// Ids of one owner's tasks of one kind, in `order`, strictly past `after` (compared by id),
/// at most `n`.
fn owner_ids(
    store: &SledStore,
    owner: &str,
    kind: TaskKind,
    after: Option<&str>,
    order: Order,
    n: usize,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let prefix = owner_prefix(owner, kind);
    children(
        &store.trees.tasks_by_owner,
        prefix,
        after,
        order,
        "list tasks",
    )
    .take(n)
    .collect()
}
