//! Billing of chat messages (docs/api.md, "Billing of messages"). A message is billed once,
//! when it ends: while it runs, its estimate (the input count plus `max_tokens`, at the model's
//! prices, rounded up to whole credits) is reserved in memory against the key's quota
//! (`chat_ledger::Reservations`), so that concurrent messages cannot spend more than the key
//! has; at the end one `charge` entry takes the real usage's cost under the message id
//! (nothing when the upstream failed). Charges are queued (`chat_ledger::ChargeQueue`) and
//! written in batches by [`write_charges`]: a message's own path does no store write.
//!
//! With a `cluster`, the reservation is held in Redis against the key's stored balance less
//! every live relay's reservations (one atomic script to reserve, one to release), so relays
//! sharing a store cannot together admit more than a key has; while Redis does not answer,
//! a message is reserved in this process, as without a cluster.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use error_codes::{ApiError, ErrorCode};
use messages::Usage;
use store::{Charge, Key, LedgerKind};

use crate::app::App;
use crate::ground::chat_ledger::{CHARGE_BATCH, Held, Reserved, release};
use crate::ground::cluster::{Admission, Cluster};

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
    /// Credits reserved (0 for unlimited keys and free models), and where.
    reserved: Reserved,
}

impl Drop for Bill {
    fn drop(&mut self) {
        let reserved = std::mem::take(&mut self.reserved);
        if reserved.amount <= 0 {
            return;
        }
        if reserved.shared {
            if let Some(cluster) = &self.app.cluster {
                cluster.release_later(self.key_id.clone(), reserved.amount);
            }
            return;
        }
        release(
            &mut self.app.reservations.lock().by_key,
            &self.key_id,
            reserved.amount,
        );
    }
}

/// Why a message is refused for its estimate.
fn short(estimate: i64, available: i64) -> ApiError {
    ApiError::new(
        ErrorCode::InsufficientQuota,
        format!(
            "this message may cost up to {estimate} credits (its input and max_tokens); the key has {} left",
            available.max(0)
        ),
    )
}

/// How often to read the balance again when charges are written meanwhile, before
/// answering that the store is too busy to admit the message exactly.
const READS: usize = 16;
/// How long an admission refused for its balance waits for this relay's queued charges to be
/// written (releasing their reservations) before it looks again.
const WAIT_FOR_CHARGES: Duration = Duration::from_millis(200);
/// How long the writer gathers charges after the first of a batch: one store transaction then
/// carries the charges of every message that ended meanwhile, also when few run at once. Each
/// transaction costs the embedded store a log write on one of its threads (and it wakes every
/// idle one of them), so fewer, larger batches cost less CPU per message: a busy relay writes
/// about 40 a second; when more than 1,024 charges come within a gathering time, a full batch
/// is written at once, without waiting. At 37,000 streams a second on 2 cores the charges
/// cost about 1.7 µs a message with 10 ms (an unpriced model, which writes none, against a
/// priced one).
const GATHER: Duration = Duration::from_millis(25);

fn too_busy() -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        "the key's balance is changing too fast to reserve this message; retry",
    )
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
            reserved: Reserved::default(),
        };
        if estimate <= 0 || key.quota.is_none() {
            return Ok(bill);
        }
        match bill.reserve(estimate).await {
            // Charges of this relay's ended messages are on their way to the store, their
            // reservations held until they are written: once they are, look again.
            Err(e) if e.code == ErrorCode::InsufficientQuota && app.charges.is_pending() => {
                app.charges.drained(WAIT_FOR_CHARGES).await;
                bill.reserve(estimate).await?;
            }
            other => other?,
        }
        Ok(bill)
    }

    /// Reserves `estimate`: shared through Redis when there is a cluster (in this process when
    /// Redis does not answer, logged by the cluster), else in this process.
    async fn reserve(&mut self, estimate: i64) -> Result<(), ApiError> {
        if let Some(cluster) = self.app.cluster.clone()
            && let Ok(admitted) = self.open_shared(&cluster, estimate).await
        {
            return admitted;
        }
        self.open_local(estimate).await
    }

    /// Reserves in Redis against the stored balance less every live relay's reservations.
    /// The outer error: Redis did not answer.
    async fn open_shared(
        &mut self,
        cluster: &Cluster,
        estimate: i64,
    ) -> Result<Result<(), ApiError>, crate::ground::cluster::ClusterError> {
        let app = self.app.clone();
        for _ in 0..READS {
            let releases = cluster.releases(&self.key_id).await?;
            let stored = match app.store.key(&self.key_id).await {
                Ok(key) => key.and_then(|k| k.quota),
                Err(e) => return Ok(Err(crate::ground::http::store_unavailable(e))),
            };
            let Some(stored) = stored else {
                return Ok(Ok(()));
            };
            match cluster
                .admit(&self.key_id, releases, stored, estimate)
                .await?
            {
                Admission::Admitted => {
                    self.reserved = Reserved {
                        amount: estimate,
                        shared: true,
                    };
                    return Ok(Ok(()));
                }
                Admission::Short(available) => return Ok(Err(short(estimate, available))),
                // A charge was written and released after the read: read again.
                Admission::ReadAgain => continue,
            }
        }
        Ok(Err(too_busy()))
    }

    /// Reserves in this process's [`crate::ground::chat_ledger::Reservations`].
    async fn open_local(&mut self, estimate: i64) -> Result<(), ApiError> {
        let app = self.app.clone();
        let key = &self.key_id;
        for _ in 0..READS {
            let releases = app.reservations.lock().releases;
            let stored = app
                .store
                .key(key)
                .await
                .map_err(crate::ground::http::store_unavailable)?
                .and_then(|k| k.quota);
            let Some(stored) = stored else {
                return Ok(());
            };
            let mut held = app.reservations.lock();
            if held.releases != releases {
                // A charge was written and its reservation released after the read: the
                // balance read may not count it.
                continue;
            }
            let mine = held.by_key.entry(key.clone()).or_insert(0);
            let available = stored.saturating_sub(*mine);
            if available < estimate {
                if *mine == 0 {
                    held.by_key.remove(key);
                }
                return Err(short(estimate, available));
            }
            *mine += estimate;
            self.reserved = Reserved {
                amount: estimate,
                shared: false,
            };
            return Ok(());
        }
        Err(too_busy())
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
        self.app.metrics.chat(
            &self.model,
            usage.all_input(),
            usage.output_tokens,
            cost.unsigned_abs(),
        );
        if cost <= 0 {
            return;
        }
        // With the reservation taken, dropping the bill releases nothing and needs neither id:
        // they move into the charge.
        let reserved = std::mem::take(&mut self.reserved);
        let charge = Charge {
            key_id: std::mem::take(&mut self.key_id),
            task_id: std::mem::take(&mut self.id),
            amount: cost,
        };
        if let Some((charge, reserved)) = self.app.charges.push(charge, reserved) {
            // The queue is full (the store is behind): this message writes its own charge.
            let app = self.app.clone();
            tokio::spawn(async move { write_batch(&app, vec![(charge, reserved)]).await });
        }
    }
}

/// Writes charges in one store transaction, then releases their reservations (counting the
/// release, see [`crate::ground::chat_ledger::Reservations`]).
async fn write_batch(app: &App, items: Vec<(Charge, Reserved)>) {
    let (charges, reserved): (Vec<Charge>, Vec<Reserved>) = items.into_iter().unzip();
    match app.store.charges(&charges).await {
        Ok(_) => app.engine.metrics().ledger_total(
            LedgerKind::Charge,
            charges.len() as u64,
            charges.iter().map(|c| c.amount.unsigned_abs()).sum(),
        ),
        Err(e) => tracing::error!("writing {} chat charges: {e}", charges.len()),
    }
    let mut shared = Vec::new();
    {
        let mut held: std::sync::MutexGuard<'_, Held> = app.reservations.lock();
        held.releases += 1;
        for (charge, r) in charges.iter().zip(reserved) {
            if r.shared {
                shared.push((charge.key_id.clone(), r.amount));
            } else {
                release(&mut held.by_key, &charge.key_id, r.amount);
            }
        }
    }
    if let Some(cluster) = &app.cluster
        && !shared.is_empty()
    {
        cluster.release(shared, true).await;
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
        // One wake-up per batch: the writer sleeps out the gathering time instead of waking
        // for every charge that arrives meanwhile, then takes what has queued. A batch that
        // is already full is written at once: when charges come faster than a batch a
        // gathering time, sleeping would let the queue grow until it overflows.
        if batch.len() < CHARGE_BATCH {
            tokio::time::sleep(GATHER).await;
            while batch.len() < CHARGE_BATCH
                && let Ok(charge) = rx.try_recv()
            {
                batch.push(charge);
            }
        }
        let items = std::mem::take(&mut batch);
        let n = items.len();
        write_batch(&app, items).await;
        app.charges.pending.fetch_sub(n, Ordering::SeqCst);
        app.charges.written.notify_waiters();
    }
}
