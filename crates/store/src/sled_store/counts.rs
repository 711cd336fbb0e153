//! How many tasks of each kind are in each status, for [`crate::Store::task_counts`]: counted
//! once when the store opens, then kept by the steps that create, move and delete tasks, after
//! their transaction committed. Exact, because one process writes an embedded store.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use crate::{TaskCount, TaskKind, TaskStatus};

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
