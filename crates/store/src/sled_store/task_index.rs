//! The keys of the task indexes: `tasks_by_owner` (owner, kind, id) and `due` (the next poll
//! time, then the id); and the creation-time order of task ids.

use super::index::{split_time_key, time_key};
use super::trees::DUE;
use crate::{StoreError, Task, TaskKind};

const fn kind_byte(kind: TaskKind) -> u8 {
    match kind {
        TaskKind::Video => b'v',
        TaskKind::Generation => b'g',
    }
}

/// `owner \0 kind \0`: the start of the keys of one owner's tasks of one kind.
pub(super) fn owner_prefix(owner: &str, kind: TaskKind) -> Vec<u8> {
    [owner.as_bytes(), &[0, kind_byte(kind), 0]].concat()
}

pub(super) fn owner_key(owner: &str, kind: TaskKind, id: &str) -> Vec<u8> {
    [owner_prefix(owner, kind).as_slice(), id.as_bytes()].concat()
}

/// The task's `due` index key: none once final; `u64::MAX` for an unfinished task without a
/// poll time (found by `unfinished_tasks`, never due).
pub(super) fn due_key(task: &Task) -> Option<Vec<u8>> {
    if task.status.is_final() {
        return None;
    }
    let ms = task.next_poll_ms.unwrap_or(u64::MAX);
    Some(time_key(ms, task.id.as_bytes()))
}

pub(super) fn split_due_key(key: &[u8]) -> Result<(u64, &[u8]), StoreError> {
    split_time_key(key, DUE, "due index key shorter than 9 bytes")
}

/// Creation-time order of ids of any kind: `prefix_<ULID>` compared by the ULID, then by the
/// whole id.
pub(super) fn sort_key(id: &[u8]) -> (&[u8], &[u8]) {
    let ulid = match id.iter().rposition(|&b| b == b'_') {
        Some(i) => &id[i + 1..],
        None => id,
    };
    (ulid, id)
}
