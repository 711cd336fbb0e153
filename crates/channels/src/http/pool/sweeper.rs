//! A lane's sweeper: the task that lets go of the lane's idle connections the upstream closed
//! or that expired, and of the shared HTTP/2 connections left unused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Wake, Waker};
use std::time::Instant;

use futures_util::task::AtomicWaker;

use super::Pool;
use crate::http::deadline::Deadline;

impl Pool {
    /// Lets go of `lane`'s idle connections that the upstream closed or that expired, each
    /// kept one watched again by `waker`: when the oldest of those left expires, if any.
    fn sweep(&self, lane: usize, waker: &Waker) -> Option<Instant> {
        let now = Instant::now();
        let mut cx = Context::from_waker(waker);
        let mut lane = self.lane(lane);
        let mut next: Option<Instant> = None;
        let mut at = |at: Instant| next = Some(next.map_or(at, |n| n.min(at)));
        for conns in &mut lane.origins {
            conns.idle.retain_mut(|idle| {
                now.duration_since(idle.since) < self.idle_timeout
                    && !idle.one.conn.is_closed(&mut cx)
            });
            if let Some(oldest) = conns.idle.first() {
                at(oldest.since + self.idle_timeout);
            }
            // A shared connection goes once it has had no stream open for the idle timeout;
            // one with streams open is looked at again an idle timeout later.
            conns.shared.retain(|shared| {
                let streams = shared.open.load(Ordering::Relaxed);
                let unused = now.duration_since(shared.used) >= self.idle_timeout;
                !shared.closed.get() && (streams > 0 || !unused)
            });
            for shared in &conns.shared {
                let streams = shared.open.load(Ordering::Relaxed);
                at(if streams > 0 {
                    now + self.idle_timeout
                } else {
                    shared.used + self.idle_timeout
                });
            }
        }
        lane.timed = next.is_some();
        next
    }
}

/// What wakes a lane's sweeper task: the socket of one of the lane's idle connections, which
/// the reactor readies when the upstream closes it, or a connection put in a lane whose oldest
/// idle connection's expiry is not timed yet. One per lane that ever had an idle connection.
#[derive(Default)]
pub(super) struct Sweeper {
    task: AtomicWaker,
    woken: AtomicBool,
}

impl Wake for Sweeper {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Sweeper {
    /// Starts the sweeper of `pool`'s `lane` on this thread's runtime (none outside one: then
    /// requests alone let go of what they find closed or expired).
    pub(super) fn start(pool: &Arc<Pool>, lane: usize) -> Option<Arc<Sweeper>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let sweeper = Arc::new(Sweeper::default());
        runtime.spawn(Sweeper::run(Arc::downgrade(pool), lane, sweeper.clone()));
        Some(sweeper)
    }

    /// Sweeps the lane whenever it is woken or its oldest idle connection expires, until the
    /// pool is gone.
    async fn run(pool: Weak<Pool>, lane: usize, sweeper: Arc<Sweeper>) {
        // Should the runtime end first, the next connection put in the lane starts another.
        struct Stopped(Weak<Pool>, usize);
        impl Drop for Stopped {
            fn drop(&mut self) {
                if let Some(pool) = self.0.upgrade() {
                    pool.lane(self.1).sweeper = None;
                }
            }
        }
        let _stopped = Stopped(pool.clone(), lane);
        let waker = Waker::from(sweeper.clone());
        let mut timer = Deadline::default();
        let mut expiry: Option<Instant> = None;
        loop {
            std::future::poll_fn(|cx| {
                sweeper.task.register(cx.waker());
                if sweeper.woken.swap(false, Ordering::AcqRel) {
                    return std::task::Poll::Ready(());
                }
                match expiry {
                    Some(at) => timer.poll_until(at.into(), cx),
                    None => std::task::Poll::Pending,
                }
            })
            .await;
            let Some(pool) = pool.upgrade() else {
                return;
            };
            expiry = pool.sweep(lane, &waker);
        }
    }
}
