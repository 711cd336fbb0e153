//! [`GroupFlush`]: callers that flush at the same moment share one disk sync.

use std::sync::{Arc, Mutex};

use sled::Db;
use tokio::sync::Notify;

use super::usage_log::UsageLog;

/// Group commit: callers that need their writes on disk share flushes.
///
/// A caller takes a ticket after its write. A flush that starts after the ticket was taken
/// covers the write; the caller either starts that flush (nobody is flushing) or waits for one
/// to finish whose start came after its ticket. Only the flush itself runs on a blocking
/// thread: the callers wait as tasks, so a burst of durable steps holds one blocking thread,
/// not one each.
#[derive(Default)]
pub(super) struct GroupFlush {
    state: Mutex<FlushState>,
    done: Notify,
    /// Flushes started so far, for the tests that check that callers share them.
    #[cfg(test)]
    started: std::sync::atomic::AtomicU64,
    /// Holds flushes before they begin while a test wants every caller waiting.
    #[cfg(test)]
    pub(super) gate: Gate,
}

/// A gate a flush waits at before it begins (tests only).
#[cfg(test)]
#[derive(Default)]
pub(super) struct Gate {
    closed: Mutex<bool>,
    opened: std::sync::Condvar,
}

#[cfg(test)]
impl Gate {
    pub(super) fn set(&self, closed: bool) {
        *super::locked::locked(&self.closed) = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = super::locked::locked(&self.closed);
        while *closed {
            closed = self
                .opened
                .wait(closed)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

#[derive(Default)]
struct FlushState {
    /// Tickets handed out so far.
    issued: u64,
    /// Every ticket up to this one is on disk.
    flushed: u64,
    /// A flush is under way.
    running: bool,
    /// The last flush failed: its error, for the callers it covered.
    failed: Option<(u64, String)>,
}

impl GroupFlush {
    /// Flushes started so far.
    #[cfg(test)]
    pub(super) fn started(&self) -> u64 {
        self.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tickets handed out so far: callers that have asked for a flush.
    #[cfg(test)]
    pub(super) fn issued(&self) -> u64 {
        super::locked::locked(&self.state).issued
    }

    /// Puts the usage log's file and then the database on disk (the file first: the
    /// database's committed end of the log never runs ahead of the file on disk). The disk
    /// sync runs on a blocking thread, never on the caller's async worker, and finishes even
    /// if the caller stops waiting for it.
    pub(super) async fn flush(
        self: &Arc<Self>,
        db: &Db,
        log: &Arc<UsageLog>,
    ) -> Result<(), String> {
        let ticket = {
            let mut state = super::locked::locked(&self.state);
            state.issued += 1;
            state.issued
        };
        loop {
            // Registered before the state is read: a flush that ends in between still wakes it.
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = super::locked::locked(&self.state);
                if state.flushed >= ticket {
                    return match &state.failed {
                        Some((upto, e)) if *upto >= ticket => Err(e.clone()),
                        _ => Ok(()),
                    };
                }
                if !state.running {
                    state.running = true;
                    #[cfg(test)]
                    self.started
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let run = Running {
                        group: self.clone(),
                        upto: state.issued,
                        result: None,
                    };
                    let (db, log) = (db.clone(), log.clone());
                    drop(state);
                    tokio::task::spawn_blocking(move || {
                        let mut run = run;
                        #[cfg(test)]
                        run.group.gate.pass();
                        let result = log
                            .sync()
                            .map_err(|e| format!("usage log: {e}"))
                            .and_then(|()| db.flush().map(drop).map_err(|e| e.to_string()));
                        // Let go of the database before the callers hear of it: one of them
                        // may close the store and open it again at once.
                        drop((db, log));
                        run.result = Some(result);
                    });
                }
            }
            notified.await;
        }
    }
}

/// The flush under way. Dropped when it ends, and also when it never ran (the runtime was
/// shutting down) or panicked: either way the next caller may flush again and the callers it
/// covered hear how it went.
struct Running {
    group: Arc<GroupFlush>,
    upto: u64,
    result: Option<Result<(), String>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err("the flush stopped before it finished".to_owned()));
        let mut state = super::locked::locked(&self.group.state);
        state.running = false;
        state.flushed = self.upto;
        state.failed = result.err().map(|e| (self.upto, e));
        drop(state);
        self.group.done.notify_waiters();
    }
}
