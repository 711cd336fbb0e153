//! The engine's loop: claims due tasks from the store and takes one step on each, a bounded
//! number at once. The schedule lives in the store (each task's `next_poll_ms`, indexed), so
//! after a restart the engine simply finds the due tasks again. A claim holds a task from
//! every other claimer for a lease (`claim_lease_secs`), so relays sharing a store never work
//! on one task at once, and a dead relay's tasks are taken over when their leases run out.
//! Every status change is a `transition`, so a cancel racing a completion settles or refunds
//! exactly once, whoever wins. On a shared store a new task needs no claim: the request that
//! stored it stored it claimed by this relay and handed it over in memory ([`crate::handed`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use store::{Task, TaskStatus};
use tokio::sync::{Semaphore, watch};

use crate::clock::now_ms;
use crate::jobs::job_for;
use crate::poll::poll;
use crate::schedule::{fail_task, reschedule, time_out};
use crate::state::Engine;
use crate::submit::{ambiguous, submit, under_way};

/// Tasks handled at once.
const CONCURRENCY: usize = 64;
/// Due tasks fetched per pass.
const BATCH: usize = 256;
/// How often the engine looks for due tasks when nothing asks it to sooner.
const TICK: Duration = Duration::from_millis(100);
/// Steps that must have ended before the engine looks again at once, when its last look
/// found more due tasks than it could start.
const REFILL: u32 = (CONCURRENCY / 4) as u32;
/// The least time between two looks when new tasks wake the engine: the tasks stored
/// meanwhile are claimed together, one claim (a statement on a shared store) for all of
/// them, instead of one per wake. A task a request made due waits at most this long.
const WAKE_GAP: Duration = Duration::from_millis(5);

/// What ended the loop's wait.
#[derive(Clone, Copy, PartialEq)]
enum Woken {
    /// A request changed a task's schedule: look at the store (after [`WAKE_GAP`]).
    Store,
    /// A new task was handed over ([`crate::handed`]).
    Handed,
    /// A tick went by since the last look at the store.
    Tick,
    /// Steps ended after every slot was taken.
    Refilled,
    Shutdown,
}

/// Runs until `shutdown` turns true, then waits (bounded) for the steps under way.
pub async fn run(engine: Arc<Engine>, mut shutdown: watch::Receiver<bool>) {
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut looked = tokio::time::Instant::now();
    // Whether the loop is to look at the store for due tasks when it has room: not when only
    // new tasks were handed over, which need no claim.
    let mut look = true;
    loop {
        if *shutdown.borrow() {
            break;
        }
        let lease_ms = engine.settings.claim_lease_secs.max(1).saturating_mul(1000);
        // Start no more than there are slots for: a claimed task waits for its lease otherwise.
        let free = permits.available_permits().min(BATCH);
        // New tasks first, but when the store is to be looked at, half the slots at most: a
        // stream of new tasks does not keep the due ones (polls) waiting.
        let first = if look { free.div_ceil(2) } else { free };
        let mut handed = engine.handed.take(first, now_ms(), lease_ms);
        let room = free - handed.len();
        let claimed = if room == 0 || !look {
            Ok(Vec::new())
        } else {
            look = false;
            looked = tokio::time::Instant::now();
            engine.store.claim_due(now_ms(), lease_ms, room).await
        };
        // As many due tasks as there were free slots: more may be due now, so look again as
        // soon as some steps have ended, not a tick later (a tick of 64 steps would cap the
        // engine at 640 steps a second).
        let claims_full = room > 0 && claimed.as_ref().is_ok_and(|due| due.len() == room);
        let now = now_ms();
        let due = match claimed {
            Ok(due) => due,
            Err(e) => {
                tracing::error!("engine: claiming due tasks: {e}");
                Vec::new()
            }
        };
        // The slots the claim left, to new tasks again.
        let left = room - due.len();
        if left > 0 && handed.len() == first {
            handed.extend(engine.handed.take(left, now, lease_ms));
        }
        let saturated = handed.len() + due.len() == free || claims_full;
        // A handed task was due when it was stored, a lease before its next look.
        let starts = handed
            .into_iter()
            .map(|task| {
                let due_ms = task.next_poll_ms.unwrap_or(now).saturating_sub(lease_ms);
                (task, due_ms)
            })
            .chain(due.into_iter().map(|c| (c.task, c.due_ms)));
        for (task, due_ms) in starts {
            engine.metrics.claimed(now.saturating_sub(due_ms));
            let fresh = in_flight
                .lock()
                .map(|mut set| set.insert(task.id.clone()))
                .unwrap_or(false);
            if !fresh {
                continue;
            }
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let engine = engine.clone();
            let in_flight = in_flight.clone();
            tokio::spawn(async move {
                let id = task.id.clone();
                let claim = (task.status, task.next_poll_ms);
                tokio::select! {
                    () = step(&engine, task) => {}
                    () = hold(&engine, &id, claim, lease_ms) => {}
                }
                if let Ok(mut set) = in_flight.lock() {
                    set.remove(&id);
                }
                drop(permit);
            });
        }
        let refilled = async {
            if saturated {
                // Taken and given back at once: only the room is waited for.
                let _room = permits.acquire_many(REFILL).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        // With every slot taken, new tasks and the tick wait for the room (a look without
        // room claims nothing).
        let handed_over = async {
            if saturated {
                std::future::pending::<()>().await;
            } else {
                engine.handed.ready().await;
            }
        };
        let tick = async {
            if saturated {
                std::future::pending::<()>().await;
            } else {
                tokio::time::sleep_until(looked + TICK).await;
            }
        };
        let woken = tokio::select! {
            _ = engine.wake.notified() => Woken::Store,
            () = handed_over => Woken::Handed,
            () = tick => Woken::Tick,
            () = refilled => Woken::Refilled,
            _ = shutdown.changed() => Woken::Shutdown,
        };
        // A look asked for and not yet made (no room) stays asked for.
        look |= match woken {
            Woken::Store | Woken::Tick => true,
            // Room again: the store may hold more due tasks if the last claim was full.
            Woken::Refilled => claims_full || looked.elapsed() >= TICK,
            Woken::Handed | Woken::Shutdown => false,
        };
        if woken == Woken::Store {
            // The tasks stored within the gap are claimed with this one.
            tokio::select! {
                () = tokio::time::sleep_until(looked + WAKE_GAP) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
    // Let the steps under way finish, for at most a few seconds.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        permits.acquire_many(CONCURRENCY as u32),
    )
    .await;
}

/// Renews the claim on task `id` while its step runs (the step's own writes set the task's
/// next time; a renewal only moves a claim the step has not replaced). Never returns.
async fn hold(engine: &Engine, id: &str, claim: (TaskStatus, Option<u64>), lease_ms: u64) {
    let (status, mut held) = claim;
    loop {
        tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
        let until = now_ms().saturating_add(lease_ms);
        let renewed = engine
            .store
            .transition(
                id,
                &[status],
                status,
                &|t| {
                    if t.next_poll_ms == held {
                        t.next_poll_ms = Some(until);
                    }
                },
                &[],
            )
            .await;
        match renewed {
            Ok(task) if task.next_poll_ms == Some(until) => held = Some(until),
            Ok(_) => break,
            Err(store::StoreError::WrongStatus { .. } | store::StoreError::TaskNotFound(_)) => {
                break;
            }
            Err(e) => tracing::warn!("engine: task {id}: renewing its claim: {e}"),
        }
    }
    std::future::pending::<()>().await;
}

/// One look at one task, as claimed (read in the claim's transaction, so as it is now).
async fn step(engine: &Arc<Engine>, task: Task) {
    if let Some(channel) = under_way(&task).map(str::to_owned) {
        // A submission whose answer was never recorded: never sent again, even past the
        // deadline (the task fails as an ambiguous submission, counted as one).
        let reason = "the relay stopped while the submission was under way";
        ambiguous(engine, &task, &channel, reason).await;
        return;
    }
    let now = now_ms();
    if now >= task.deadline_ms {
        time_out(engine, task).await;
        return;
    }
    match (task.status, task.upstream_id.clone()) {
        (TaskStatus::Queued, _) | (TaskStatus::Running, None) => submit(engine, task).await,
        (TaskStatus::Running, Some(upstream_id)) => {
            let channel = task
                .channel
                .as_deref()
                .and_then(|name| engine.channel_named(name))
                .cloned();
            let Some(channel) = channel else {
                // Its channel is gone from the configuration; look again later.
                reschedule(engine, &task, now + 5_000, false).await;
                return;
            };
            let job = match job_for(engine, &task, &channel) {
                Ok(job) => job,
                Err(message) => {
                    fail_task(engine, &task, "upstream_error", &message).await;
                    return;
                }
            };
            poll(engine, task, &channel, &job, &upstream_id).await
        }
        _ => {}
    }
}
