use std::time::{Duration, Instant};

use hyper::rt::Timer;

use super::*;

/// A runtime like a connection thread's: one thread, the ticker spawned on it.
fn ticking<F: Future>(f: impl FnOnce() -> F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ticker = tokio::spawn(tick());
        // The ticker marks the thread as ticking when it first runs.
        tokio::task::yield_now().await;
        let out = f().await;
        ticker.abort();
        out
    })
}

/// Polls `f` once.
async fn poll_once<F: Future + ?Sized>(mut f: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
}

fn waiting() -> usize {
    WHEEL.with(|w| w.borrow().waiting())
}

/// The most a test waits for a deadline to be reached.
const BOUND: Duration = Duration::from_secs(5);

#[test]
fn a_deadline_is_reached_never_early_and_its_slot_let_go() {
    ticking(|| async {
        let deadline = Instant::now() + Duration::from_millis(60);
        let sleep = CoarseSleep::until(deadline);
        tokio::time::timeout(BOUND, sleep)
            .await
            .expect("reached within the bound");
        assert!(Instant::now() >= deadline, "reached early");
        assert_eq!(waiting(), 0);
    });
}

#[test]
fn a_dropped_sleep_gives_its_slot_back_and_others_still_fire() {
    ticking(|| async {
        let far = Instant::now() + Duration::from_secs(3600);
        let mut dropped = Box::pin(CoarseSleep::until(far));
        // Polled once: it waits in a slot.
        assert!(poll_once(dropped.as_mut()).await.is_pending());
        assert_eq!(waiting(), 1);
        drop(dropped);
        assert_eq!(waiting(), 0);
        // A slot let go is taken again by the next sleep, which still fires.
        let near = Instant::now() + Duration::from_millis(30);
        tokio::time::timeout(BOUND, CoarseSleep::until(near))
            .await
            .expect("reached within the bound");
        assert!(Instant::now() >= near);
    });
}

#[test]
fn only_passed_deadlines_are_woken() {
    ticking(|| async {
        let mut far = Box::pin(CoarseSleep::until(
            Instant::now() + Duration::from_secs(3600),
        ));
        assert!(poll_once(far.as_mut()).await.is_pending());
        let near = Instant::now() + Duration::from_millis(30);
        tokio::time::timeout(BOUND, CoarseSleep::until(near))
            .await
            .expect("reached within the bound");
        assert!(poll_once(far.as_mut()).await.is_pending(), "woken early");
        assert_eq!(waiting(), 1);
    });
}

#[test]
fn hyper_resets_move_a_waiting_deadline() {
    ticking(|| async {
        let timer = CoarseTimer;
        let mut sleep = timer.sleep_until(Instant::now() + Duration::from_secs(3600));
        assert!(poll_once(sleep.as_mut()).await.is_pending());
        let sooner = Instant::now() + Duration::from_millis(40);
        timer.reset(&mut sleep, sooner);
        tokio::time::timeout(BOUND, sleep)
            .await
            .expect("the reset deadline is reached");
        assert!(Instant::now() >= sooner);
        assert_eq!(waiting(), 0);
    });
}

#[test]
fn without_a_ticker_tokio_s_timer_is_used() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_millis(30);
        tokio::time::timeout(BOUND, CoarseSleep::until(deadline))
            .await
            .expect("reached within the bound");
        assert!(Instant::now() >= deadline);
        assert_eq!(waiting(), 0);
    });
}
