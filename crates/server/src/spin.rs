//! A connection thread looks for work a little longer before it sleeps.
//!
//! A connection thread with nothing to do sleeps in the kernel until one of its sockets has
//! something for it, and the sleep and the wake-up after it can cost more than a request's
//! whole work: on a virtual machine a thread that slept and was woken spent about 16 µs of CPU
//! on it (a switch of threads at each end and an interrupt between virtual cores), where a
//! status poll takes about 10 µs. Under load such a sleep came between most of a thread's
//! requests whenever its sockets were quiet for a moment, and at one connection twice a
//! message (waiting for the upstream's answer, then for the client's next request).
//!
//! So when a request begins or ends, the thread's spinner keeps the thread looking for the next
//! piece of work for `server.spin_us`: the runtime checks the thread's sockets without blocking
//! (the spinner only yields to it), and between two looks the thread offers its core to any
//! other thread that wants it. Once a whole window has passed with no request begun or ended,
//! the spinner waits for the next request and the thread sleeps. An idle relay does not spin:
//! only a request starts a window.

use std::cell::RefCell;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

struct State {
    /// Requests begun or ended on this thread.
    work: u64,
    /// The spinner, while it waits for a request.
    parked: Option<Waker>,
}

thread_local! {
    static SPIN: RefCell<State> = const {
        RefCell::new(State {
            work: 0,
            parked: None,
        })
    };
}

/// A request began or ended on this thread: its spinner (where it has one) looks on for
/// another window.
pub fn work() {
    let parked = SPIN.with(|s| {
        let mut s = s.borrow_mut();
        s.work = s.work.wrapping_add(1);
        s.parked.take()
    });
    if let Some(spinner) = parked {
        spinner.wake();
    }
}

fn work_seen() -> u64 {
    SPIN.with(|s| s.borrow().work)
}

/// Runs this thread's spinner: spawn it once on a connection thread's runtime, with a window
/// above zero.
pub async fn run(window: Duration) {
    let mut seen = work_seen();
    loop {
        // Until a request begins: the thread sleeps whenever nothing else is to be done.
        std::future::poll_fn(|cx| {
            SPIN.with(|s| {
                let mut s = s.borrow_mut();
                if s.work != seen {
                    Poll::Ready(())
                } else {
                    s.parked = Some(cx.waker().clone());
                    Poll::Pending
                }
            })
        })
        .await;
        seen = work_seen();
        let mut since = Instant::now();
        loop {
            // Back to the runtime: it runs whatever is ready and, with only this task left
            // (deferred by the yield), looks at its sockets without blocking.
            tokio::task::yield_now().await;
            let now_seen = work_seen();
            if now_seen != seen {
                seen = now_seen;
                since = Instant::now();
                continue;
            }
            if since.elapsed() >= window {
                break;
            }
            // Nothing new yet: any other thread that wants this core has it first.
            std::thread::yield_now();
        }
    }
}

/// Whether this thread's spinner waits for a request (rather than spinning).
#[cfg(test)]
fn waiting() -> bool {
    SPIN.with(|s| s.borrow().parked.is_some())
}

#[cfg(test)]
mod tests;
