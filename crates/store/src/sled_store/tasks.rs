//! The task steps: creation and the compare-and-swap transition (each put together with its
//! ledger entries by the caller, in one transaction), deletion, and the reads: by id, one
//! owner's pages, all tasks, and the due and unfinished tasks from the `due` index.

use super::index::{children, move_entry};
use super::record::{backend, check_id, decode, encode, read};
use super::task_index::{due_key, owner_key, owner_prefix, sort_key, split_due_key};
use super::trees::{DUE, SledStore, TASKS, TASKS_BY_OWNER, Tx};
use super::txn::{TxResult, abort, ensure_new, get, or_abort, put};
use crate::{Order, Page, StoreError, Task, TaskKind, TaskQuery, TaskStatus};

/// Largest page `list_tasks` returns.
const MAX_PAGE: usize = 100;

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

/// Writes a new task (`bytes` is its record) and its index entries; an id in use aborts.
pub(super) fn insert(tx: &Tx<'_>, task: &Task, bytes: &[u8]) -> TxResult<()> {
    ensure_new(tx.tasks, "task", &task.id)?;
    tx.tasks.insert(task.id.as_bytes(), bytes)?;
    tx.tasks_by_owner
        .insert(owner_key(&task.owner, task.kind, &task.id), &[][..])?;
    if let Some(due) = due_key(task) {
        tx.due.insert(due, &[][..])?;
    }
    Ok(())
}

pub(super) fn get_by_id(store: &SledStore, id: &str) -> Result<Option<Task>, StoreError> {
    read(&store.trees.tasks, TASKS, id.as_bytes(), "read task")
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

/// [`crate::Store::all_tasks`].
pub(super) fn all(store: &SledStore, limit: usize) -> Result<Vec<Task>, StoreError> {
    let mut ids = Vec::new();
    for key in store.trees.tasks.iter().keys() {
        ids.push(key.map_err(|e| backend("list all tasks", e))?.to_vec());
    }
    ids.sort_by(|a, b| sort_key(b).cmp(&sort_key(a)));
    ids.truncate(limit);
    tasks_for(store, TASKS, ids)
}

/// The compare-and-swap of [`crate::Store::transition`] on the task alone, keeping the due
/// index in step; returns the task as written.
pub(super) fn transition(
    tx: &Tx<'_>,
    id: &str,
    from: &[TaskStatus],
    to: TaskStatus,
    update: &dyn Fn(&mut Task),
) -> TxResult<Task> {
    let Some(old): Option<Task> = get(tx.tasks, TASKS, id.as_bytes())? else {
        return abort(StoreError::TaskNotFound(id.to_owned()));
    };
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
    move_entry(tx.due, due_key(&old), due_key(&new))?;
    put(tx.tasks, id.as_bytes(), "task", &new)?;
    Ok(new)
}

/// [`crate::Store::due_tasks`].
pub(super) fn due(store: &SledStore, now_ms: u64, limit: usize) -> Result<Vec<Task>, StoreError> {
    let mut ids = Vec::new();
    for key in store.trees.due.iter().keys().take(limit) {
        let key = key.map_err(|e| backend("read due index", e))?;
        let (ms, id) = split_due_key(&key)?;
        if ms > now_ms {
            break;
        }
        ids.push(id.to_vec());
    }
    tasks_for(store, DUE, ids)
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
    let what = format!("delete task {id}");
    let removed = store.trees.tx(&what, |tx| {
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
    })?;
    if removed.is_some() {
        store.flush_after(&what)?;
    }
    Ok(removed)
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
