//! The task, ledger, key and meta steps of [`SledStore`], by area: the cases are built here
//! and tested in the modules below.

use super::*;
use crate::test_util::{TempDir, open_store, tid};
use crate::{KeyStatus, LedgerKind, Outputs, TaskKind};

fn key(id: &str, hash: &str, quota: Option<i64>) -> Key {
    Key {
        id: id.to_owned(),
        name: format!("{id} name"),
        group: "default".to_owned(),
        hash: hash.to_owned(),
        prefix: "sk-".to_owned(),
        quota,
        quota_used: 0,
        rate_limit: None,
        models: None,
        expires_at: None,
        status: KeyStatus::Active,
        created_at: 1,
    }
}

fn task(id: &str, owner: &str, status: TaskStatus, next_poll_ms: Option<u64>) -> Task {
    Task {
        id: id.to_owned(),
        kind: if id.starts_with("gen_") {
            TaskKind::Generation
        } else {
            TaskKind::Video
        },
        owner: owner.to_owned(),
        model: "model_h3".to_owned(),
        status,
        progress: 0,
        created_at: 1,
        updated_at: 1,
        completed_at: None,
        expires_at: None,
        deadline_ms: 10_000_000,
        next_poll_ms,
        params: crate::Params::new(&serde_json::json!({"prompt": "a cat"})).unwrap(),
        channel: None,
        upstream_id: None,
        submitted_ms: None,
        attempts: 0,
        sim: None,
        outputs: Outputs::default(),
        error: None,
        warnings: Vec::new(),
        price: 30,
    }
}

fn draft(key_id: &str, task_id: &str, kind: LedgerKind, amount: i64) -> LedgerDraft {
    LedgerDraft {
        key_id: key_id.to_owned(),
        task_id: task_id.to_owned(),
        kind,
        amount,
    }
}

fn ids(tasks: &[Task]) -> Vec<String> {
    tasks.iter().map(|t| t.id.clone()).collect()
}

fn noop(_: &mut Task) {}

/// One field of each entry of a key's ledger, oldest first.
fn ledger_of<T>(store: &SledStore, key_id: &str, field: impl Fn(&LedgerEntry) -> T) -> Vec<T> {
    store.ledger(key_id).unwrap().iter().map(field).collect()
}

/// Creates a queued task of `owner`, due at 5 ms, with `ledger`.
fn create(
    store: &SledStore,
    id: &str,
    owner: &str,
    ledger: &[LedgerDraft],
) -> Result<(), StoreError> {
    store.create_task(&task(id, owner, TaskStatus::Queued, Some(5)), ledger)
}

/// Creates a queued task of `owner`, due at 5 ms, whose pre-deduction takes `-amount` from the
/// owner's key.
fn prededuct(store: &SledStore, id: &str, owner: &str, amount: i64) -> Result<(), StoreError> {
    create(
        store,
        id,
        owner,
        &[draft(owner, id, LedgerKind::Prededuct, amount)],
    )
}

/// A store with the key `key_a` (quota 100) and one queued task of it, whose pre-deduction
/// took 30; and the task's id.
fn with_a_task() -> (TempDir, SledStore, String) {
    let (dir, store) = open_store();
    store.create_key(&key("key_a", "ha", Some(100))).unwrap();
    let id = tid("video", 1);
    prededuct(&store, &id, "key_a", -30).unwrap();
    (dir, store, id)
}

/// Moves a task from `from` to `to`, changing nothing else, with `ledger`.
fn step(
    store: &SledStore,
    id: &str,
    from: TaskStatus,
    to: TaskStatus,
    ledger: &[LedgerDraft],
) -> Result<Task, StoreError> {
    store.transition(id, &[from], to, &noop, ledger)
}

/// The first page of at most `limit` of `owner`'s tasks, newest first.
fn owner_page(store: &SledStore, owner: &str, limit: usize) -> Page<Task> {
    store
        .list_tasks(&TaskQuery {
            owner: owner.to_owned(),
            limit,
            ..TaskQuery::default()
        })
        .unwrap()
}

fn charge(key_id: &str, task_id: &str, amount: i64) -> crate::Charge {
    crate::Charge {
        key_id: key_id.into(),
        task_id: task_id.into(),
        amount,
    }
}

mod durability;
mod keys;
mod ledger;
mod tasks;
mod transitions;
