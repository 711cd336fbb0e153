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
//!
//! A thread spins only while its requests begin and end at least about as often as its window
//! is long (a moving average of the time between two of them is at most twice the window):
//! where the next one is not due that soon (a thread whose requests wait on a database, say),
//! a window would nearly always pass in vain, and its spinning would only take the core from
//! the processes that thread waits for.

use std::cell::RefCell;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

struct State {
    /// Requests begun or ended on this thread.
    work: u64,
    /// The spinner, while it waits for a request.
    parked: Option<Waker>,
    /// When a request last began or ended here.
    last: Option<Instant>,
    /// The moving average of the time between two of those, in nanoseconds.
    gap_ns: u64,
    /// The longest time between two of those that the average takes in (a longer one counts
    /// as this long): four windows, so that a burst after a long quiet spins after a few
    /// requests.
    longest_ns: u64,
    /// Windows begun, for the tests.
    #[cfg(test)]
    spins: u64,
}

thread_local! {
    static SPIN: RefCell<State> = const {
        RefCell::new(State {
            work: 0,
            parked: None,
            last: None,
            gap_ns: 0,
            longest_ns: 0,
            #[cfg(test)]
            spins: 0,
        })
    };
}

/// A request began or ended on this thread `now` (the caller's clock reading, so that a
/// request reads the clock no more for this): its spinner (where it has one) looks on for
/// another window.
pub fn work(now: Instant) {
    let parked = SPIN.with(|s| {
        let mut s = s.borrow_mut();
        s.work = s.work.wrapping_add(1);
        if s.longest_ns > 0 {
            // Only a thread with a spinner keeps the time.
            if let Some(last) = s.last {
                let gap = (now.duration_since(last).as_nanos() as u64).min(s.longest_ns);
                s.gap_ns = (s.gap_ns * 3 + gap) / 4;
            }
            s.last = Some(now);
        }
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
    let window_ns = window.as_nanos() as u64;
    SPIN.with(|s| s.borrow_mut().longest_ns = window_ns.saturating_mul(4).max(1));
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
        // Requests too far apart for a window to catch the next: sleep at once.
        if SPIN.with(|s| s.borrow().gap_ns) > window_ns.saturating_mul(2) {
            continue;
        }
        #[cfg(test)]
        SPIN.with(|s| s.borrow_mut().spins += 1);
        // When the window began: the first look that found nothing new (the clock is read
        // only by looks that find nothing new, not by those that keep finding work).
        let mut since: Option<Instant> = None;
        loop {
            // Back to the runtime: it runs whatever is ready and, with only this task left
            // (deferred by the yield), looks at its sockets without blocking.
            tokio::task::yield_now().await;
            let now_seen = work_seen();
            if now_seen != seen {
                seen = now_seen;
                since = None;
                continue;
            }
            let now = Instant::now();
            if now.duration_since(*since.get_or_insert(now)) >= window {
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

/// Windows this thread's spinner has begun.
#[cfg(test)]
fn spins() -> u64 {
    SPIN.with(|s| s.borrow().spins)
}

#[cfg(test)]
mod tests;
