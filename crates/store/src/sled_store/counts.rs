//! How many tasks of each kind are in each status, for [`crate::Store::task_counts`]: counted
//! once when the store opens, then kept by the steps that create, move and delete tasks, after
//! their transaction committed. Exact, because one process writes an embedded store.
//!
//! Counting reads every task (seconds over a million), so a clean stop
//! ([`crate::Store::close`]) leaves the counts in a tree of their own, and the next opening
//! takes them out of it, durably, before any step can change them: a stop that was not clean
//! leaves nothing there, and the opening after it counts.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use super::record::{backend, open_tree};
use crate::{StoreError, TaskCount, TaskKind, TaskStatus};

/// The tree a clean stop leaves the counts in, under [`LEFT`].
const AT_STOP: &str = "task_counts_at_stop";
const LEFT: &[u8] = b"counts";

/// The counts, one per kind and status.
#[derive(Debug, Default)]
pub(super) struct TaskCounts {
    counts: [[AtomicU64; TaskStatus::ALL.len()]; TaskKind::ALL.len()],
}

/// The two fields of a task record that are counted.
#[derive(Deserialize)]
struct Head {
    kind: TaskKind,
    status: TaskStatus,
}

impl TaskCounts {
    /// The counts a clean stop left, taken out of the store (durably); else counted from
    /// `tasks`.
    pub(super) fn open(db: &sled::Db, tasks: &sled::Tree) -> Result<TaskCounts, StoreError> {
        let left = open_tree(db, AT_STOP)?
            .remove(LEFT)
            .map_err(|e| backend("take the task counts", e))?;
        if let Some(bytes) = left {
            db.flush()
                .map_err(|e| backend("take the task counts: flush", e))?;
            if let Some(counts) = TaskCounts::decode(&bytes) {
                return Ok(counts);
            }
        }
        Ok(TaskCounts::of(tasks))
    }

    /// Leaves the counts for the next opening; for a clean stop, after the last step (the
    /// caller flushes).
    pub(super) fn leave(&self, db: &sled::Db) -> Result<(), StoreError> {
        open_tree(db, AT_STOP)?
            .insert(LEFT, self.encode())
            .map_err(|e| backend("leave the task counts", e))?;
        Ok(())
    }

    /// Every count, kind by kind and status by status, as big-endian `u64`s.
    fn encode(&self) -> Vec<u8> {
        self.all()
            .iter()
            .flat_map(|c| c.count.to_be_bytes())
            .collect()
    }

    /// [`TaskCounts::encode`]'s bytes; `None` for any other length (another version's kinds
    /// or statuses: counted again).
    fn decode(bytes: &[u8]) -> Option<TaskCounts> {
        let counts = TaskCounts::default();
        let slots = TaskKind::ALL
            .iter()
            .flat_map(|&kind| TaskStatus::ALL.iter().map(move |&status| (kind, status)));
        if bytes.len() != 8 * TaskKind::ALL.len() * TaskStatus::ALL.len() {
            return None;
        }
        for ((kind, status), word) in slots.zip(bytes.chunks_exact(8)) {
            let n = u64::from_be_bytes(word.try_into().ok()?);
            counts.slot(kind, status).store(n, Ordering::Relaxed);
        }
        Some(counts)
    }

    /// Counts the records of `tasks`; one that does not read as a task is left out (and said).
    pub(super) fn of(tasks: &sled::Tree) -> TaskCounts {
        let counts = TaskCounts::default();
        for entry in tasks.iter() {
            let read = entry
                .map_err(|e| e.to_string())
                .and_then(|(_, v)| serde_json::from_slice::<Head>(&v).map_err(|e| e.to_string()));
            match read {
                Ok(head) => counts.add(head.kind, head.status),
                Err(e) => tracing::warn!("counting tasks: a record left out: {e}"),
            }
        }
        counts
    }

    fn slot(&self, kind: TaskKind, status: TaskStatus) -> &AtomicU64 {
        let k = match kind {
            TaskKind::Video => 0,
            TaskKind::Generation => 1,
        };
        let s = match status {
            TaskStatus::Queued => 0,
            TaskStatus::Running => 1,
            TaskStatus::Succeeded => 2,
            TaskStatus::Failed => 3,
            TaskStatus::Cancelled => 4,
        };
        &self.counts[k][s]
    }

    pub(super) fn add(&self, kind: TaskKind, status: TaskStatus) {
        self.slot(kind, status).fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn remove(&self, kind: TaskKind, status: TaskStatus) {
        // Never below zero, whatever the order of concurrent updates.
        let _ = self
            .slot(kind, status)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    pub(super) fn moved(&self, kind: TaskKind, from: TaskStatus, to: TaskStatus) {
        if from != to {
            self.add(kind, to);
            self.remove(kind, from);
        }
    }

    pub(super) fn all(&self) -> Vec<TaskCount> {
        TaskKind::ALL
            .iter()
            .flat_map(|&kind| {
                TaskStatus::ALL.iter().map(move |&status| TaskCount {
                    kind,
                    status,
                    count: self.slot(kind, status).load(Ordering::Relaxed),
                })
            })
            .collect()
    }
}
