//! [`GroupFlush`]: callers that flush at the same moment share one disk sync.

use std::sync::{Condvar, Mutex};

use sled::Db;

use super::usage_log::UsageLog;

/// Group commit: callers that need their writes on disk share flushes.
///
/// A caller takes a ticket after its write. A flush that starts after the ticket was taken
/// covers the write; the caller either runs that flush itself (nobody is flushing) or waits
/// for one to finish whose start came after its ticket.
#[derive(Default)]
pub(super) struct GroupFlush {
    state: Mutex<FlushState>,
    done: Condvar,
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
    /// Puts the usage log's file and then the database on disk (the file first: the
    /// database's committed end of the log never runs ahead of the file on disk).
    pub(super) fn flush(&self, db: &Db, log: &UsageLog) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.issued += 1;
        let ticket = state.issued;
        loop {
            if state.flushed >= ticket {
                return match &state.failed {
                    Some((upto, e)) if *upto >= ticket => Err(e.clone()),
                    _ => Ok(()),
                };
            }
            if !state.running {
                state.running = true;
                let upto = state.issued;
                drop(state);
                let result = log
                    .sync()
                    .map_err(|e| format!("usage log: {e}"))
                    .and_then(|()| db.flush().map(drop).map_err(|e| e.to_string()));
                state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.running = false;
                state.flushed = upto;
                state.failed = result.as_ref().err().map(|e| (upto, e.clone()));
                self.done.notify_all();
                continue;
            }
            state = self.done.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}
