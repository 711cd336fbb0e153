//! [`GroupFlush`]: callers that flush at the same moment share one disk sync, and writes
//! handed to it ([`GroupFlush::commit`]) share one transaction.

use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, oneshot};

use crate::StoreError;

/// Group commit: callers that need their writes on disk share flushes.
///
/// A caller takes a ticket after its write. A flush that starts after the ticket was taken
/// covers the write; the caller either starts that flush (nobody is flushing) or waits for one
/// to finish whose start came after its ticket. Only the flush itself runs on a blocking
/// thread: the callers wait as tasks, so a burst of durable steps holds one blocking thread,
/// not one each.
///
/// A caller may also hand over a write of type `W` with its ticket, uncommitted: a flush
/// commits every write handed over before it began, all in one transaction (`commit`), just
/// before it syncs. sled writes out its log buffer for every transaction it commits (on its
/// IO threads, each one woken), so a burst of task steps costs one transaction and one log
/// write per flush instead of one each.
///
/// What is flushed (`T`, the store) is the caller's: a flush holds a clone of it only while
/// it runs and lets go of it before its callers hear, so that one of them may close the store
/// and open it again at once.
pub(super) struct GroupFlush<W, T> {
    state: Mutex<FlushState<W>>,
    done: Notify,
    /// Commits the writes a flush took, answering each.
    commit: fn(&T, Vec<Handed<W>>),
    /// Puts what was written on disk.
    sync: fn(&T) -> Result<(), String>,
    /// Flushes started so far, for the tests that check that callers share them.
    #[cfg(test)]
    started: std::sync::atomic::AtomicU64,
    /// Holds flushes before they begin while a test wants every caller waiting.
    #[cfg(test)]
    pub(super) gate: Gate,
}

/// A write handed to the group commit, and where its caller hears how its commit went.
pub(super) struct Handed<W> {
    pub(super) write: W,
    reply: oneshot::Sender<Result<bool, StoreError>>,
}

impl<W> Handed<W> {
    /// Tells the caller how the write's commit went: written (`true`), or not written because
    /// what it was computed from had changed (`false`), or failed. The caller hears only once
    /// the flush after it has ended; a write dropped unanswered was not committed.
    pub(super) fn answer(self, outcome: Result<bool, StoreError>) {
        // The caller may have stopped waiting: nobody left to tell.
        let _ = self.reply.send(outcome);
    }
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

struct FlushState<W> {
    /// Tickets handed out so far.
    issued: u64,
    /// Every ticket up to this one is on disk.
    flushed: u64,
    /// A flush is under way.
    running: bool,
    /// The last flush failed: its error, for the callers it covered.
    failed: Option<(u64, String)>,
    /// Writes handed over since the last flush began, each with its ticket taken.
    handed: Vec<Handed<W>>,
}

impl<W: Send + 'static, T: Clone + Send + 'static> GroupFlush<W, T> {
    /// A group commit whose flushes commit the writes handed over with `commit` (as one
    /// transaction, answering each: [`Handed::answer`]), then sync with `sync`; both on the
    /// flush's blocking thread.
    pub(super) fn new(
        commit: fn(&T, Vec<Handed<W>>),
        sync: fn(&T) -> Result<(), String>,
    ) -> GroupFlush<W, T> {
        GroupFlush {
            state: Mutex::new(FlushState {
                issued: 0,
                flushed: 0,
                running: false,
                failed: None,
                handed: Vec::new(),
            }),
            done: Notify::new(),
            commit,
            sync,
            #[cfg(test)]
            started: Default::default(),
            #[cfg(test)]
            gate: Gate::default(),
        }
    }

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

    /// Puts everything written to `target` so far on disk. The disk sync runs on a blocking
    /// thread, never on the caller's async worker, and finishes even if the caller stops
    /// waiting for it.
    pub(super) async fn flush(self: &Arc<Self>, target: &T) -> Result<(), String> {
        let ticket = self.ticket(None, target);
        self.covered(ticket, target).await
    }

    /// Hands `write` over to be committed (with every other write handed over meanwhile) by
    /// the next flush, and waits for that flush: its commit's outcome once it is on disk,
    /// `false` when it was not written because what it was computed from had changed. The
    /// write is committed even if the caller stops waiting; `what` names it in a flush's
    /// error.
    pub(super) async fn commit(
        self: &Arc<Self>,
        target: &T,
        write: W,
        what: &str,
    ) -> Result<bool, StoreError> {
        let (reply, mut outcome) = oneshot::channel();
        let ticket = self.ticket(Some(Handed { write, reply }), target);
        let flushed = self.covered(ticket, target).await;
        let flush_error = |e: String| StoreError::Backend(format!("{what}: flush: {e}"));
        match outcome.try_recv() {
            // Its transaction failed: nothing of it was written, whatever the flush did.
            Ok(Err(e)) => Err(e),
            Ok(Ok(written)) => flushed.map(|()| written).map_err(flush_error),
            // Dropped unanswered: the flush that took it stopped before it committed.
            Err(_) => {
                Err(flush_error(flushed.err().unwrap_or_else(|| {
                    "the write was not committed".to_owned()
                })))
            }
        }
    }

    /// Takes a ticket, handing `write` over with it, and starts a flush when none is under
    /// way; one under way flushes again when it ends, for every ticket taken meanwhile.
    fn ticket(self: &Arc<Self>, write: Option<Handed<W>>, target: &T) -> u64 {
        let mut state = super::locked::locked(&self.state);
        state.issued += 1;
        let ticket = state.issued;
        state.handed.extend(write);
        self.start(state, target);
        ticket
    }

    /// Starts a flush of every ticket taken so far, unless one is under way.
    fn start(self: &Arc<Self>, mut state: std::sync::MutexGuard<'_, FlushState<W>>, target: &T) {
        if state.running {
            return;
        }
        state.running = true;
        let upto = state.issued;
        let writes = std::mem::take(&mut state.handed);
        drop(state);
        let run = Running {
            group: self.clone(),
            upto,
            ended: false,
        };
        let target = target.clone();
        tokio::task::spawn_blocking(move || run.rounds(writes, target));
    }

    /// Waits until a flush that began after `ticket` was taken has ended: how it went. Starts
    /// one when none is under way (the last stopped before its end).
    async fn covered(self: &Arc<Self>, ticket: u64, target: &T) -> Result<(), String> {
        loop {
            // Registered before the state is read: a flush that ends in between still wakes it.
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = super::locked::locked(&self.state);
                if state.flushed >= ticket {
                    return match &state.failed {
                        Some((upto, e)) if *upto >= ticket => Err(e.clone()),
                        _ => Ok(()),
                    };
                }
                self.start(state, target);
            }
            notified.await;
        }
    }
}

/// The flush under way, on its blocking thread: it flushes again while tickets were taken
/// during its last round, so callers never have to start the next one. Dropped unended (the
/// runtime was shutting down, or a round panicked), it still lets the next caller flush and
/// tells the callers it covered.
struct Running<W: Send + 'static, T: Clone + Send + 'static> {
    group: Arc<GroupFlush<W, T>>,
    /// The last ticket the current round covers.
    upto: u64,
    ended: bool,
}

impl<W: Send + 'static, T: Clone + Send + 'static> Running<W, T> {
    /// Commits `writes` and flushes, round after round, until no ticket was taken during a
    /// round.
    fn rounds(mut self, mut writes: Vec<Handed<W>>, target: T) {
        loop {
            let group = &self.group;
            #[cfg(test)]
            {
                group.gate.pass();
                group
                    .started
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if !writes.is_empty() {
                (group.commit)(&target, std::mem::take(&mut writes));
            }
            let result = (group.sync)(&target);
            let mut state = super::locked::locked(&group.state);
            state.flushed = self.upto;
            state.failed = result.err().map(|e| (self.upto, e));
            if state.issued > self.upto {
                self.upto = state.issued;
                writes = std::mem::take(&mut state.handed);
                drop(state);
                group.done.notify_waiters();
                continue;
            }
            state.running = false;
            self.ended = true;
            // Let go of the store before the callers hear of it: one of them may close it and
            // open it again at once.
            drop(target);
            drop(state);
            group.done.notify_waiters();
            return;
        }
    }
}

impl<W: Send + 'static, T: Clone + Send + 'static> Drop for Running<W, T> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let mut state = super::locked::locked(&self.group.state);
        state.running = false;
        state.flushed = self.upto;
        state.failed = Some((self.upto, "the flush stopped before it finished".to_owned()));
        drop(state);
        self.group.done.notify_waiters();
    }
}
