//! New tasks handed to the loop in memory by the request that stored them.
//!
//! On a store relays share (PostgreSQL, [`store::Store::shared`]), a request handler stores
//! its new task already claimed by this relay: its `next_poll_ms` is the end of a lease, as a
//! claim would have set it, so no other relay sharing the store takes it meanwhile. The task
//! then waits here for a free step slot, and the loop starts it as it stored it, with no claim:
//! a statement and a write of the task's row less per task, and no wait for the loop's next
//! look at the store.
//!
//! Nothing is lost when a handed task is not started: it is in the store, due when its lease
//! ends, and the loop's claims find it then (after a stop, or when it waited here for more
//! than half its lease, behind steps that were slow to end, and was dropped). So the queue is
//! bounded: past [`MAX`] a new task is stored due at once, as it was before any hand-off, for
//! the claims to find.

use std::collections::VecDeque;
use std::sync::Mutex;

use store::Task;
use tokio::sync::Notify;

/// The most tasks waiting to be started.
const MAX: usize = 1024;

/// The tasks handed over and not yet started, oldest first.
#[derive(Default)]
pub(crate) struct Handed {
    queue: Mutex<VecDeque<Task>>,
    ready: Notify,
}

impl Handed {
    /// Whether a new task may be handed over (the queue is not full).
    pub(crate) fn has_room(&self) -> bool {
        self.queue.lock().is_ok_and(|q| q.len() < MAX)
    }

    /// Hands `task` (stored leased to this relay) over, and tells the loop.
    pub(crate) fn push(&self, task: Task) {
        if let Ok(mut queue) = self.queue.lock() {
            queue.push_back(task);
        }
        self.ready.notify_one();
    }

    /// Up to `n` tasks to start now, oldest first. A task with less than half of its lease
    /// left (`lease_ms`, at `now`) is dropped instead: the claims find it when its lease ends,
    /// and a step that started it now might outlive the lease before its first renewal.
    pub(crate) fn take(&self, n: usize, now: u64, lease_ms: u64) -> Vec<Task> {
        let Ok(mut queue) = self.queue.lock() else {
            return Vec::new();
        };
        let mut taken = Vec::with_capacity(n.min(queue.len()));
        while taken.len() < n {
            let Some(task) = queue.pop_front() else {
                break;
            };
            if task.next_poll_ms.unwrap_or(0) >= now.saturating_add(lease_ms / 2) {
                taken.push(task);
            }
        }
        taken
    }

    /// Returns when a task was handed over since the last call returned.
    pub(crate) async fn ready(&self) {
        self.ready.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Task `n`, stored with its lease ending at `lease_end`.
    fn task(n: u64, lease_end: u64) -> Task {
        Task {
            next_poll_ms: Some(lease_end),
            ..crate::billing_props::task(n, 10)
        }
    }

    fn ids(tasks: Vec<Task>) -> Vec<String> {
        tasks.into_iter().map(|t| t.id).collect()
    }

    #[test]
    fn tasks_are_taken_oldest_first_and_stale_ones_dropped() {
        let handed = Handed::default();
        // Leases of 10 s taken at 0, 1 and 6 s.
        handed.push(task(0, 10_000));
        handed.push(task(1, 11_000));
        handed.push(task(2, 16_000));
        // At 5.5 s the first has 4.5 s left: dropped; the second has 5.5 s: taken.
        assert_eq!(ids(handed.take(1, 5_500, 10_000)), [task(1, 0).id]);
        assert_eq!(ids(handed.take(8, 5_500, 10_000)), [task(2, 0).id]);
        assert!(handed.take(8, 5_500, 10_000).is_empty());
    }

    #[test]
    fn the_queue_is_bounded() {
        let handed = Handed::default();
        for n in 0..MAX as u64 {
            assert!(handed.has_room());
            handed.push(task(n, u64::MAX));
        }
        assert!(!handed.has_room());
        assert_eq!(handed.take(MAX, 0, 10_000).len(), MAX);
        assert!(handed.has_room());
    }
}
