//! What request handlers hand the engine: new tasks, cancels, and an upstream's word that a
//! task changed (a vendor callback), which brings its next poll forward no sooner than the
//! channel's minimum poll interval allows.

use std::sync::Arc;

use store::{IdemAnswer, IdemTicket, StoreError, Task, TaskStatus};

use crate::calls::cancel_upstream;
use crate::clock::now_ms;
use crate::state::Engine;
use crate::steps::{self, prededuct};

impl Engine {
    /// A task this instance moved to its final status: its duration and the ledger entry that
    /// came with the move, counted for the metrics.
    pub(crate) fn finished(&self, task: &Task) {
        self.metrics.finished(task);
        let entries = match task.status {
            TaskStatus::Succeeded => steps::settle(task),
            _ => steps::refund(task),
        };
        self.metrics.ledger(&entries);
    }

    /// Stores a new task with its pre-deduction, durably, and hands it to the loop to submit
    /// (on a shared store; else the loop is woken to claim it).
    pub async fn enqueue(self: &Arc<Self>, task: &Task) -> Result<(), StoreError> {
        let ledger = prededuct(task);
        let Some(leased) = self.leased(task) else {
            self.store.create_task(task, &ledger).await?;
            self.metrics.ledger(&ledger);
            self.wake();
            return Ok(());
        };
        let engine = self.clone();
        handed_over(tokio::spawn(async move {
            engine.store.create_task(&leased, &ledger).await?;
            engine.metrics.ledger(&ledger);
            engine.handed.push(leased);
            Ok(())
        }))
        .await
    }

    /// [`Engine::enqueue`] for a request with an `Idempotency-Key`: the key's record (claimed
    /// by `ticket`) is completed with `answer` in the same store step as the task.
    pub async fn enqueue_idempotent(
        self: &Arc<Self>,
        task: &Task,
        ticket: &IdemTicket,
        answer: &IdemAnswer,
    ) -> Result<(), StoreError> {
        let ledger = prededuct(task);
        let Some(leased) = self.leased(task) else {
            self.store
                .create_task_idempotent(task, &ledger, ticket, answer)
                .await?;
            self.metrics.ledger(&ledger);
            self.wake();
            return Ok(());
        };
        let (engine, ticket, answer) = (self.clone(), ticket.clone(), answer.clone());
        handed_over(tokio::spawn(async move {
            engine
                .store
                .create_task_idempotent(&leased, &ledger, &ticket, &answer)
                .await?;
            engine.metrics.ledger(&ledger);
            engine.handed.push(leased);
            Ok(())
        }))
        .await
    }

    /// New `task` as it is stored to be handed to the loop: claimed by this relay, its next
    /// look at the end of a lease from now, as a claim would leave it ([`crate::handed`]).
    /// `None`, and the task stored due now for the loop's claims, when the store is this
    /// process's alone (a claim costs no statement there, and a task stored just before a stop
    /// is taken up at once after the restart rather than when its lease ends), or when the loop
    /// has too many waiting already.
    fn leased(&self, task: &Task) -> Option<Task> {
        if !self.store.shared() || !self.handed.has_room() {
            return None;
        }
        let lease = self.settings.claim_lease_secs.max(1).saturating_mul(1000);
        let mut leased = task.clone();
        leased.next_poll_ms = Some(now_ms().saturating_add(lease));
        Some(leased)
    }

    /// Cancels a task that has not ended, refunding its pre-deduction, and asks its upstream
    /// (if one accepted it) to stop. `StoreError::WrongStatus` when it had ended already.
    pub async fn cancel(self: &Arc<Self>, task: &Task) -> Result<Task, StoreError> {
        let cancelled = steps::cancel(&*self.store, task).await?;
        self.finished(&cancelled);
        if let (Some(channel), Some(upstream_id)) = (
            cancelled
                .channel
                .as_deref()
                .and_then(|c| self.channel_named(c)),
            cancelled.upstream_id.clone(),
        ) {
            cancel_upstream(self, channel.clone(), upstream_id);
        }
        Ok(cancelled)
    }

    /// Brings task `task`'s next poll forward because its upstream said it changed (a
    /// vendor's callback, whose holder may send any number): to [`earliest_poll`], never
    /// sooner. Returns whether it moved: a task already due by then, ended, or not yet accepted
    /// upstream is left as it is, without a store write.
    pub async fn poll_soon(&self, task: &Task) -> Result<bool, StoreError> {
        let Some(min) = self.min_poll_ms(task) else {
            return Ok(false);
        };
        let lease = self.settings.claim_lease_secs.max(1).saturating_mul(1000);
        let now = now_ms();
        if task.status.is_final() || earliest_poll(task, now, min, lease).is_none() {
            return Ok(false);
        }
        let moved = std::sync::atomic::AtomicBool::new(false);
        let result = self
            .store
            .transition(
                &task.id,
                &[task.status],
                task.status,
                &|t| {
                    // As the task is now, inside the step (a poll may have come between).
                    let earliest = earliest_poll(t, now, min, lease);
                    moved.store(earliest.is_some(), std::sync::atomic::Ordering::Relaxed);
                    if let Some(at) = earliest {
                        t.next_poll_ms = Some(at);
                    }
                },
                &[],
            )
            .await;
        match result {
            Ok(_) => {
                let moved = moved.load(std::sync::atomic::Ordering::Relaxed);
                if moved {
                    self.wake();
                }
                Ok(moved)
            }
            // It ended or moved on meanwhile: nothing to bring forward.
            Err(StoreError::WrongStatus { .. } | StoreError::TaskNotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The minimum poll interval of the channel running `task`, in ms; `None` before an
    /// upstream accepted it.
    fn min_poll_ms(&self, task: &Task) -> Option<u64> {
        task.upstream_id.as_ref()?;
        let channel = self.channel_named(task.channel.as_deref()?)?;
        Some(u64::try_from(channel.min_poll_interval().as_millis()).unwrap_or(u64::MAX))
    }
}

/// The time a vendor's callback may bring `task`'s next poll forward to, at `now`: a minimum
/// poll interval (`min`) after the last call to its upstream (its last poll, else its
/// submission), and after the engine last took it up (a claim holds a task until `lease` after
/// it; a step under way renews that), and not before `now` nor past the task's deadline.
/// `None` when the task is due by then already (nothing to bring forward).
fn earliest_poll(task: &Task, now: u64, min: u64, lease: u64) -> Option<u64> {
    let called = task.polled_ms.or(task.submitted_ms)?;
    let next = task.next_poll_ms?;
    let taken_up = next.saturating_sub(lease);
    let at = now
        .max(called.saturating_add(min))
        .max(taken_up.saturating_add(min))
        .min(task.deadline_ms);
    (at < next).then_some(at)
}

/// The answer of a creation stored leased and handed over on a task of its own, which runs to
/// its end even when the request that started it goes away (its client gone): a task stored
/// claimed by this relay is always handed over, never left to wait for its lease to run out.
async fn handed_over(
    creation: tokio::task::JoinHandle<Result<(), StoreError>>,
) -> Result<(), StoreError> {
    creation
        .await
        .unwrap_or_else(|e| Err(StoreError::Backend(format!("storing a new task: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::earliest_poll;
    use store::{Outputs, Task, TaskKind, TaskStatus};

    /// A running task polled at `polled`, next due at `next`.
    fn running(polled: Option<u64>, next: u64) -> Task {
        Task {
            id: "gen_1".into(),
            kind: TaskKind::Generation,
            owner: "key_1".into(),
            model: "gen2-pro".into(),
            status: TaskStatus::Running,
            progress: 10,
            created_at: 0,
            updated_at: 0,
            completed_at: None,
            expires_at: None,
            deadline_ms: 1_000_000,
            next_poll_ms: Some(next),
            params: store::Params::new(&serde_json::Value::Null).expect("params"),
            channel: Some("ark".into()),
            upstream_id: Some("cgt-1".into()),
            submitted_ms: Some(1_000),
            polled_ms: polled,
            attempts: 0,
            sim: None,
            outputs: Outputs::default(),
            error: None,
            warnings: Vec::new(),
            price: 10,
            callback_url: None,
        }
    }

    const MIN: u64 = 2_000;
    const LEASE: u64 = 30_000;

    #[test]
    fn a_callback_brings_the_poll_forward_no_sooner_than_the_minimum_interval() {
        // Polled at 10 s, next at 40 s: a callback at 20 s makes it due at once.
        assert_eq!(
            earliest_poll(&running(Some(10_000), 40_000), 20_000, MIN, LEASE),
            Some(20_000)
        );
        // Within the interval of the last poll: due at its end.
        assert_eq!(
            earliest_poll(&running(Some(10_000), 40_000), 10_500, MIN, LEASE),
            Some(12_000)
        );
        // Due by then already (a callback just moved it): nothing to write.
        assert_eq!(
            earliest_poll(&running(Some(10_000), 12_000), 10_700, MIN, LEASE),
            None
        );
        assert_eq!(
            earliest_poll(&running(Some(10_000), 11_000), 10_700, MIN, LEASE),
            None
        );
        // Never polled: the submission counts.
        assert_eq!(
            earliest_poll(&running(None, 20_000), 1_500, MIN, LEASE),
            Some(3_000)
        );
        // Taken up by the engine at 20 s (held until 50 s): not before 22 s, whatever the last
        // poll.
        assert_eq!(
            earliest_poll(&running(Some(10_000), 50_000), 20_500, MIN, LEASE),
            Some(22_000)
        );
        // Never past the deadline.
        let mut late = running(Some(10_000), 2_000_000);
        late.deadline_ms = 11_000;
        assert_eq!(earliest_poll(&late, 10_500, MIN, LEASE), Some(11_000));
        // Not yet accepted upstream, or without a schedule: nothing.
        let mut queued = running(None, 40_000);
        queued.submitted_ms = None;
        assert_eq!(earliest_poll(&queued, 20_000, MIN, LEASE), None);
        let mut unscheduled = running(Some(10_000), 40_000);
        unscheduled.next_poll_ms = None;
        assert_eq!(earliest_poll(&unscheduled, 20_000, MIN, LEASE), None);
    }
}
