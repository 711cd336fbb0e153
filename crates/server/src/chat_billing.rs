//! Billing of chat messages (docs/api.md, "Billing of messages"). A message is billed once,
//! when it ends: while it runs, its estimate (the input count plus `max_tokens`, at the model's
//! prices, rounded up to whole credits) is reserved in memory against the key's quota
//! (`chat_ledger::Reservations`), so that concurrent messages cannot spend more than the key
//! has; at the end one `charge` entry takes the real usage's cost under the message id
//! (nothing when the upstream failed). Charges are queued (`chat_ledger::ChargeQueue`) and
//! written in batches by [`write_charges`]: a message's own path does no store write.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use error_codes::{ApiError, ErrorCode};
use messages::Usage;
use store::{Charge, Key};

use crate::app::App;
use crate::chat_ledger::{CHARGE_BATCH, Held, release};

/// Credits for `usage` at the model's prices, rounded up.
pub(crate) fn cost(app: &App, model: &str, input: u64, output: u64) -> i64 {
    let Some(m) = app.config.models.get(model) else {
        return 0;
    };
    let micro = u128::from(input) * u128::from(m.input_price_per_mtok.unwrap_or(0))
        + u128::from(output) * u128::from(m.output_price_per_mtok.unwrap_or(0));
    i64::try_from(micro.div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

/// The bill of one message: what is reserved, and the charge when it ends. A bill dropped
/// without [`Bill::charge`] (the upstream failed, or the client went away before a whole
/// answer, so hyper dropped the request) charges nothing and releases its reservation.
pub(crate) struct Bill {
    app: Arc<App>,
    key_id: String,
    id: String,
    model: String,
    /// Credits reserved in [`crate::chat_ledger::Reservations`] (0 for unlimited keys and free models).
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
    pub(crate) async fn open(
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
        // How often to read the balance again when charges are written meanwhile, before
        // answering that the store is too busy to admit the message exactly.
        const READS: usize = 16;
        for _ in 0..READS {
            let releases = app.reservations.lock().releases;
            let stored = app
                .store
                .key(&key.id)
                .await
                .map_err(crate::http::store_unavailable)?
                .and_then(|k| k.quota);
            let Some(stored) = stored else {
                return Ok(bill);
            };
            let mut held = app.reservations.lock();
            if held.releases != releases {
                // A charge was written and its reservation released after the read: the
                // balance read may not count it.
                continue;
            }
            let mine = held.by_key.entry(key.id.clone()).or_insert(0);
            let available = stored.saturating_sub(*mine);
            if available < estimate {
                if *mine == 0 {
                    held.by_key.remove(&key.id);
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
            return Ok(bill);
        }
        Err(ApiError::new(
            ErrorCode::Unavailable,
            "the key's balance is changing too fast to reserve this message; retry",
        ))
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
            let app = self.app.clone();
            tokio::spawn(async move { write_batch(&app, vec![(charge, reserved)]).await });
        }
    }

    fn release(&mut self, held: &mut Held) {
        release(
            &mut held.by_key,
            &self.key_id,
            std::mem::take(&mut self.reserved),
        );
    }
}

/// Writes charges in one store transaction, then releases their reservations (counting the
/// release, see [`crate::chat_ledger::Reservations`]).
async fn write_batch(app: &App, items: Vec<(Charge, i64)>) {
    let (charges, reserved): (Vec<Charge>, Vec<i64>) = items.into_iter().unzip();
    if let Err(e) = app.store.charges(&charges).await {
        tracing::error!("writing {} chat charges: {e}", charges.len());
    }
    let mut held = app.reservations.lock();
    held.releases += 1;
    for (charge, amount) in charges.iter().zip(reserved) {
        release(&mut held.by_key, &charge.key_id, amount);
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
        write_batch(&app, items).await;
        app.charges.pending.fetch_sub(n, Ordering::SeqCst);
        app.charges.written.notify_waiters();
    }
}
