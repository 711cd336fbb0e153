//! A lane's sweeper: the task that has the pool let go of the lane's idle connections the
//! upstream closed or that expired, and of the shared HTTP/2 connections left unused, whenever
//! a socket or its timer wakes it.

/// What a sweeper sweeps: a pool's lanes.
pub(super) trait Swept: Send + Sync + 'static {
    /// Lets go of what `lane` no longer needs, each kept idle connection watched again by
    /// `waker`: when to look again, if anything is left to time.
    fn sweep(&self, lane: usize, waker: &Waker) -> Option<Instant>;

    /// The lane's sweeper has stopped (its runtime ended): the next connection kept there
    /// starts another.
    fn stopped(&self, lane: usize);
}

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Wake, Waker};
use std::time::Instant;

use futures_util::task::AtomicWaker;

use crate::http::deadline::Deadline;

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
    pub(super) fn start<P: Swept>(pool: &Arc<P>, lane: usize) -> Option<Arc<Sweeper>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let sweeper = Arc::new(Sweeper::default());
        runtime.spawn(Sweeper::run(Arc::downgrade(pool), lane, sweeper.clone()));
        Some(sweeper)
    }

    /// Sweeps the lane whenever it is woken or its oldest idle connection expires, until the
    /// pool is gone.
    async fn run<P: Swept>(pool: Weak<P>, lane: usize, sweeper: Arc<Sweeper>) {
        // Should the runtime end first, the next connection put in the lane starts another.
        struct Stopped<P: Swept>(Weak<P>, usize);
        impl<P: Swept> Drop for Stopped<P> {
            fn drop(&mut self) {
                if let Some(pool) = self.0.upgrade() {
                    pool.stopped(self.1);
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
