//! The engine's loop: finds due tasks in the store and takes one step on each, a bounded
//! number at once. The schedule lives in the store (each task's `next_poll_ms`, indexed), so
//! after a restart the engine simply finds the due tasks again. Every status change is a
//! `transition`, so a cancel racing a completion settles or refunds exactly once, whoever wins.

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
use crate::steps::blocking;
use crate::submit::submit;

/// Tasks handled at once.
const CONCURRENCY: usize = 64;
/// Due tasks fetched per pass.
const BATCH: usize = 256;
/// How often the engine looks for due tasks when nothing wakes it.
const TICK: Duration = Duration::from_millis(100);

/// Runs until `shutdown` turns true, then waits (bounded) for the steps under way.
pub async fn run(engine: Arc<Engine>, mut shutdown: watch::Receiver<bool>) {
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    loop {
        if *shutdown.borrow() {
            break;
        }
        let now = now_ms();
        match blocking(&engine.store, move |s| s.due_tasks(now, BATCH)).await {
            Ok(due) => {
                for task in due {
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
                        step(&engine, task).await;
                        if let Ok(mut set) = in_flight.lock() {
                            set.remove(&id);
                        }
                        drop(permit);
                    });
                }
            }
            Err(e) => tracing::error!("engine: reading due tasks: {e}"),
        }
        tokio::select! {
            _ = engine.wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => {}
        }
    }
    // Let the steps under way finish, for at most a few seconds.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        permits.acquire_many(CONCURRENCY as u32),
    )
    .await;
}

/// One look at one task.
async fn step(engine: &Arc<Engine>, task: Task) {
    // The due list may be older than the last step of this task (a step that ended while the
    // list was being worked through): act on the task as it is now, if it is still due.
    let id = task.id.clone();
    let task = match blocking(&engine.store, move |s| s.task(&id)).await {
        Ok(Some(task)) => task,
        Ok(None) => return,
        Err(e) => {
            tracing::error!("engine: task {}: reading it: {e}", task.id);
            return;
        }
    };
    let now = now_ms();
    if task.status.is_final() || task.next_poll_ms.is_some_and(|at| at > now) {
        return;
    }
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
