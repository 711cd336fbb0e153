//! The in-memory side of chat billing: the estimates reserved by the messages under way
//! ([`Reservations`]) and the charges on their way to the store ([`ChargeQueue`]). How a
//! message is billed is `chat_billing`'s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use store::Charge;
use tokio::sync::mpsc;

/// Estimates reserved by the messages under way, per key with a quota (unlimited keys need
/// none), and how many times reservations were released after their charges were written.
///
/// A message is admitted against a balance that counts every other message at least once:
/// a charge's reservation is released only after the charge is in the store, so a message
/// is either reserved, charged, or both for a moment (stricter, never looser). A balance read
/// from the store before a release may miss the released charge, so admission reads the
/// release count, then the balance, then checks under the lock that no release came between
/// (reading again when one did).
#[derive(Debug, Default)]
pub struct Reservations {
    held: std::sync::Mutex<Held>,
}

#[derive(Debug, Default)]
pub(crate) struct Held {
    pub(crate) by_key: foldhash::HashMap<String, i64>,
    /// Releases of written charges so far.
    pub(crate) releases: u64,
}

impl Reservations {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn release(held: &mut foldhash::HashMap<String, i64>, key_id: &str, amount: i64) {
    if amount == 0 {
        return;
    }
    if let Some(mine) = held.get_mut(key_id) {
        *mine -= amount;
        if *mine <= 0 {
            held.remove(key_id);
        }
    }
}

/// Credits a message holds until its charge is written, and where: in this process's
/// [`Reservations`], or in Redis with the other relays' (`cluster`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reserved {
    pub(crate) amount: i64,
    pub(crate) shared: bool,
}

/// The most charges one store transaction writes.
pub(crate) const CHARGE_BATCH: usize = 1024;
/// The most charges queued; past it messages write their own (backpressure, bounded memory).
const CHARGE_QUEUE: usize = 16 * CHARGE_BATCH;

/// Chat charges on their way to the store. Messages queue them as they end; one writer
/// (`chat_billing::write_charges`, run by `serve`) writes whatever has queued in one transaction, so
/// under load a store step is shared by many messages instead of costing each its own.
#[derive(Debug)]
pub struct ChargeQueue {
    pub(crate) tx: mpsc::Sender<(Charge, Reserved)>,
    pub(crate) rx: std::sync::Mutex<Option<mpsc::Receiver<(Charge, Reserved)>>>,
    /// Queued and not yet written.
    pub(crate) pending: AtomicUsize,
    pub(crate) written: tokio::sync::Notify,
}

impl Default for ChargeQueue {
    fn default() -> ChargeQueue {
        let (tx, rx) = mpsc::channel(CHARGE_QUEUE);
        ChargeQueue {
            tx,
            rx: std::sync::Mutex::new(Some(rx)),
            pending: AtomicUsize::new(0),
            written: tokio::sync::Notify::new(),
        }
    }
}

impl ChargeQueue {
    /// Queues a charge with the credits its message reserved; gives it back when the queue
    /// is full or closed.
    pub(crate) fn push(&self, charge: Charge, reserved: Reserved) -> Option<(Charge, Reserved)> {
        self.pending.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send((charge, reserved)) {
            Ok(()) => None,
            Err(e) => {
                self.pending.fetch_sub(1, Ordering::SeqCst);
                Some(e.into_inner())
            }
        }
    }

    /// Whether charges are queued and not yet written.
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst) > 0
    }

    /// Waits until every charge queued so far is written, at most `limit`; whether it was.
    pub async fn drained(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if self.pending.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, written).await.is_err() {
                return false;
            }
        }
    }
}
