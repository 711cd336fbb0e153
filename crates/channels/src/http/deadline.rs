//! [`Deadline`]: one timer for waits that come again and again (an upstream body's silence, a
//! stream's ping, a pause between events): made the first time it is waited on, then moved to
//! the next deadline, never made again.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A timer made when first polled and moved (not made again) when its deadline changes.
#[derive(Debug, Default)]
pub struct Deadline {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The end of the wait [`Deadline::poll_for`] is in, from its first poll until it is over.
    waiting_until: Option<Instant>,
}

impl Deadline {
    /// Ready once `at` has passed. A wait that ends before `at` costs no timer at all.
    pub fn poll_until(&mut self, at: Instant, cx: &mut Context<'_>) -> Poll<()> {
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
                sleep
            }
            None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
        };
        sleep.as_mut().poll(cx)
    }

    /// Ready once `after` has passed since this wait's first poll. A wait ends when it is
    /// ready or [`Deadline::restart`]ed; the next poll begins another.
    pub fn poll_for(&mut self, after: Duration, cx: &mut Context<'_>) -> Poll<()> {
        let at = *self
            .waiting_until
            .get_or_insert_with(|| Instant::now() + after);
        std::task::ready!(self.poll_until(at, cx));
        self.waiting_until = None;
        Poll::Ready(())
    }

    /// Ends the wait [`Deadline::poll_for`] is in: the next poll counts `after` from then.
    pub fn restart(&mut self) {
        self.waiting_until = None;
    }
}
