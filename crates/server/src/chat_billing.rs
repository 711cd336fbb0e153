//! Billing of chat messages (docs/api.md, "Billing of messages"). A message is billed once,
//! when it ends: while it runs, its estimate (the input count plus `max_tokens`, at the model's
//! prices, rounded up to whole credits) is reserved in memory against the key's quota
//! ([`Reservations`]), so that concurrent messages cannot spend more than the key has; at the
//! end one `charge` entry takes the real usage's cost under the message id (nothing when the
//! upstream failed). Charges are queued ([`ChargeQueue`]) and written in batches by
//! [`write_charges`]: a message's own path does no store write.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use error_codes::{ApiError, ErrorCode};
use messages::Usage;
use store::{Charge, Key};
use tokio::sync::mpsc;

use crate::app::App;

/// Credits for `usage` at the model's prices, rounded up.
pub(crate) fn cost(app: &App, model: &str, input: u64, output: u64) -> i64 {
    let Some(m) = app.config.models.get(model) else {
        return 0;
    };
    let micro = u128::from(input) * u128::from(m.input_price_per_mtok.unwrap_or(0))
        + u128::from(output) * u128::from(m.output_price_per_mtok.unwrap_or(0));
    i64::try_from(micro.div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// Estimates reserved by the messages under way, per key with a quota (unlimited keys need
/// none). The lock also covers reading the key's stored quota and writing a charge, so a
/// message is admitted against a balance that counts every other message exactly once:
/// either still reserved, or already charged.
#[derive(Debug, Default)]
pub struct Reservations {
    held: std::sync::Mutex<HashMap<String, i64>>,
}

impl Reservations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The bill of one message: what is reserved, and the charge when it ends. A bill dropped
/// without [`Bill::charge`] (the upstream failed, or the client went away before a whole
/// answer, so hyper dropped the request) charges nothing and releases its reservation.
pub(crate) struct Bill {
    app: Arc<App>,
    key_id: String,
    id: String,
    model: String,
    /// Credits reserved in [`Reservations`] (0 for unlimited keys and free models).
    reserved: i64,
}

impl Drop for Bill {
    fn drop(&mut self) {
        if self.reserved > 0 {
            let app = self.app.clone();
            self.release(&mut app.reservations.lock());
        }
    }
}

impl Bill {
    /// Reserves the estimate when the key has a quota; `402` when what the key has left,
    /// less what its other messages under way hold, cannot cover it.
    pub(crate) fn open(
        app: &Arc<App>,
        key: &Key,
        id: &str,
        model: &str,
        estimate: i64,
    ) -> Result<Bill, ApiError> {
        let mut bill = Bill {
            app: app.clone(),
            key_id: key.id.clone(),
            id: id.to_owned(),
            model: model.to_owned(),
            reserved: 0,
        };
        if estimate <= 0 || key.quota.is_none() {
            return Ok(bill);
        }
        let mut held = app.reservations.lock();
        // The balance as stored now (not as read at authentication): charges are written
        // under this lock, so it and `held` agree.
        let stored = app
            .store
            .key(&key.id)
            .map_err(crate::tasks::store_unavailable)?
            .and_then(|k| k.quota);
        let Some(stored) = stored else {
            return Ok(bill);
        };
        let mine = held.entry(key.id.clone()).or_insert(0);
        let available = stored.saturating_sub(*mine);
        if available < estimate {
            if *mine == 0 {
                held.remove(&key.id);
            }
            return Err(ApiError::new(
                ErrorCode::InsufficientQuota,
                format!(
                    "this message may cost up to {estimate} credits (its input and max_tokens); the key has {} left",
                    available.max(0)
                ),
            ));
        }
        *mine += estimate;
        bill.reserved = estimate;
        Ok(bill)
    }

    /// Queues the charge of the real usage's cost (at most what the key has left); the
    /// reservation goes with it and is released when the charge is written.
    pub(crate) fn charge(mut self, usage: Usage) {
        let cost = cost(
            &self.app,
            &self.model,
            usage.all_input(),
            usage.output_tokens,
        );
        if cost <= 0 {
            return;
        }
        let reserved = std::mem::take(&mut self.reserved);
        let charge = Charge {
            key_id: self.key_id.clone(),
            task_id: self.id.clone(),
            amount: cost,
        };
        if let Some((charge, reserved)) = self.app.charges.push(charge, reserved) {
            // The queue is full (the store is behind): this message writes its own charge.
            write_batch(&self.app, vec![(charge, reserved)]);
        }
    }

    fn release(&mut self, held: &mut HashMap<String, i64>) {
        release(held, &self.key_id, std::mem::take(&mut self.reserved));
    }
}

fn release(held: &mut HashMap<String, i64>, key_id: &str, amount: i64) {
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

/// The most charges one store transaction writes.
const CHARGE_BATCH: usize = 1024;
/// The most charges queued; past it messages write their own (backpressure, bounded memory).
const CHARGE_QUEUE: usize = 16 * CHARGE_BATCH;

/// Chat charges on their way to the store. Messages queue them as they end; one writer
/// ([`write_charges`], run by `serve`) writes whatever has queued in one transaction, so
/// under load a store step is shared by many messages instead of costing each its own.
#[derive(Debug)]
pub struct ChargeQueue {
    tx: mpsc::Sender<(Charge, i64)>,
    rx: std::sync::Mutex<Option<mpsc::Receiver<(Charge, i64)>>>,
    /// Queued and not yet written.
    pending: AtomicUsize,
    written: tokio::sync::Notify,
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
    fn push(&self, charge: Charge, reserved: i64) -> Option<(Charge, i64)> {
        self.pending.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send((charge, reserved)) {
            Ok(()) => None,
            Err(e) => {
                self.pending.fetch_sub(1, Ordering::SeqCst);
                Some(e.into_inner())
            }
        }
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

/// Writes charges in one store transaction, then releases their reservations, all under the
/// reservations' lock.
fn write_batch(app: &App, items: Vec<(Charge, i64)>) {
    let (charges, reserved): (Vec<Charge>, Vec<i64>) = items.into_iter().unzip();
    let mut held = app.reservations.lock();
    if let Err(e) = app.store.charges(&charges) {
        tracing::error!("writing {} chat charges: {e}", charges.len());
    }
    for (charge, amount) in charges.iter().zip(reserved) {
        release(&mut held, &charge.key_id, amount);
    }
}

/// Writes queued chat charges in batches until the queue closes with the app; releases each
/// message's reservation once its charge is in the store (under the reservations' lock, so
/// admissions see a message either reserved or charged).
pub async fn write_charges(app: Arc<App>) {
    let Some(mut rx) = app
        .charges
        .rx
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    else {
        return;
    };
    let mut batch = Vec::with_capacity(CHARGE_BATCH);
    while rx.recv_many(&mut batch, CHARGE_BATCH).await > 0 {
        let items = std::mem::take(&mut batch);
        let n = items.len();
        let writer = app.clone();
        let done = tokio::task::spawn_blocking(move || write_batch(&writer, items)).await;
        if let Err(e) = done {
            tracing::error!("writing chat charges: {e}");
        }
        app.charges.pending.fetch_sub(n, Ordering::SeqCst);
        app.charges.written.notify_waiters();
    }
}
