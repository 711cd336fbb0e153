//! A coarse timer for connection deadlines: a request head's, a new connection's first
//! request's and HTTP/2's keep-alive. They are counted in seconds and nearly never reached, but
//! hyper arms the head's anew for every request of a keep-alive connection; tokio's timer
//! would box, register and cancel an entry of its wheel each time and read the clock when it
//! parks. Here each connection thread keeps its own list of waiting deadlines, and a ticker
//! task on the thread wakes those that have passed every [`TICK`]: arming is a push and
//! cancelling a removal from that list, and the ticker sleeps while the list is empty.
//!
//! A deadline is never reached early (the ticker's clock only ever lags the real one) and at
//! most one tick late. On a thread without a ticker (not a connection thread) a sleep falls
//! back to tokio's timer.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How often the ticker looks at the waiting deadlines: the most a deadline is reached late.
pub const TICK: Duration = Duration::from_millis(250);

/// A thread's waiting deadlines.
struct Wheel {
    /// Whether a ticker runs on this thread.
    ticking: bool,
    /// When the ticker last looked: never ahead of the real clock.
    now: Option<Instant>,
    /// Every slot is either free (listed here) or holds a waiting deadline.
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The ticker, while it waits for a first deadline.
    ticker: Option<Waker>,
}

struct Slot {
    /// Bumped each time the slot is let go, so that an old sleep never takes a new one's.
    generation: u32,
    entry: Option<(Instant, Waker)>,
}

thread_local! {
    static WHEEL: RefCell<Wheel> = const {
        RefCell::new(Wheel {
            ticking: false,
            now: None,
            slots: Vec::new(),
            free: Vec::new(),
            ticker: None,
        })
    };
}

impl Wheel {
    fn passed(&self, deadline: Instant) -> bool {
        self.now.is_some_and(|now| now >= deadline)
    }

    /// How many deadlines are waited for.
    fn waiting(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// The deadline and waker in `place`'s slot, if the slot is still that sleep's.
    fn ours(&mut self, (index, generation): (u32, u32)) -> Option<&mut (Instant, Waker)> {
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.entry.as_mut()
    }

    /// Lets go of slot `index` (its entry already taken).
    fn free_slot(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
    }

    /// Waits for `deadline` in `place` (taking a new slot unless the one held is still ours).
    fn wait(&mut self, place: &mut Option<(u32, u32)>, deadline: Instant, waker: &Waker) {
        if let Some((at, held)) = place.and_then(|p| self.ours(p)) {
            *at = deadline;
            if !held.will_wake(waker) {
                *held = waker.clone();
            }
            return;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.entry = Some((deadline, waker.clone()));
        *place = Some((index, slot.generation));
        if let Some(ticker) = self.ticker.take() {
            ticker.wake();
        }
    }

    /// Moves the deadline waited for in `place`'s slot, if the slot is still ours.
    fn move_to(&mut self, place: (u32, u32), deadline: Instant) {
        if let Some((at, _)) = self.ours(place) {
            *at = deadline;
        }
    }

    /// Lets go of `place`'s slot if it is still ours.
    fn cancel(&mut self, place: (u32, u32)) {
        if self.ours(place).is_some() {
            self.slots[place.0 as usize].entry = None;
            self.free_slot(place.0);
        }
    }

    /// Takes the wakers of every deadline passed by `now`.
    fn expire(&mut self, now: Instant, woken: &mut Vec<Waker>) {
        self.now = Some(now);
        for index in 0..self.slots.len() as u32 {
            let entry = &mut self.slots[index as usize].entry;
            if entry.as_ref().is_some_and(|(at, _)| *at <= now)
                && let Some((_, waker)) = entry.take()
            {
                self.free_slot(index);
                woken.push(waker);
            }
        }
    }
}

/// Runs this thread's ticker; spawn it once on each connection thread's runtime.
pub async fn tick() {
    WHEEL.with(|w| w.borrow_mut().ticking = true);
    let mut woken = Vec::new();
    loop {
        // Asleep until a deadline is waited for.
        std::future::poll_fn(|cx| {
            WHEEL.with(|w| {
                let mut w = w.borrow_mut();
                if w.waiting() == 0 {
                    w.ticker = Some(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
        })
        .await;
        tokio::time::sleep(TICK).await;
        WHEEL.with(|w| w.borrow_mut().expire(Instant::now(), &mut woken));
        // Woken outside the borrow: a waker may run code that arms another deadline.
        for waker in woken.drain(..) {
            waker.wake();
        }
    }
}

/// A deadline on this thread's coarse timer.
pub struct CoarseSleep {
    deadline: Instant,
    /// The slot waited in, and its generation.
    place: Option<(u32, u32)>,
    /// tokio's timer, on a thread without a ticker.
    fallback: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl CoarseSleep {
    pub fn until(deadline: Instant) -> CoarseSleep {
        CoarseSleep {
            deadline,
            place: None,
            fallback: None,
        }
    }
}

impl Future for CoarseSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Some(fallback) = &mut this.fallback {
            return fallback.as_mut().poll(cx);
        }
        let ticking = WHEEL.with(|w| {
            let mut w = w.borrow_mut();
            if !w.ticking {
                return false;
            }
            if w.passed(this.deadline) {
                if let Some(place) = this.place.take() {
                    w.cancel(place);
                }
            } else {
                w.wait(&mut this.place, this.deadline, cx.waker());
            }
            true
        });
        if !ticking {
            let deadline = tokio::time::Instant::from_std(this.deadline);
            return this
                .fallback
                .insert(Box::pin(tokio::time::sleep_until(deadline)))
                .as_mut()
                .poll(cx);
        }
        if this.place.is_none() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for CoarseSleep {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            // During the thread's own end the wheel may be gone already: nothing to let go.
            let _ = WHEEL.try_with(|w| {
                if let Ok(mut w) = w.try_borrow_mut() {
                    w.cancel(place);
                }
            });
        }
    }
}

impl hyper::rt::Sleep for CoarseSleep {}

/// hyper's timer on the coarse one.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoarseTimer;

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(CoarseSleep::until(Instant::now() + duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(CoarseSleep::until(deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<CoarseSleep>() {
            Some(mut ours) => {
                ours.deadline = new_deadline;
                if let Some(place) = ours.place {
                    let _ = WHEEL.try_with(|w| {
                        if let Ok(mut w) = w.try_borrow_mut() {
                            w.move_to(place, new_deadline);
                        }
                    });
                }
                if let Some(fallback) = &mut ours.fallback {
                    fallback
                        .as_mut()
                        .reset(tokio::time::Instant::from_std(new_deadline));
                }
            }
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

#[cfg(test)]
mod tests;
