use std::future::Future;
use std::time::{Duration, Instant};

use super::*;

/// The most a test waits for the spinner to change its state.
const BOUND: Duration = Duration::from_secs(5);

/// A runtime like a connection thread's: one thread, the spinner spawned on it with `window`.
fn spinning<F: Future>(window: Duration, f: impl FnOnce() -> F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let spinner = tokio::spawn(run(window));
        let out = f().await;
        spinner.abort();
        out
    })
}

/// Yields to the runtime until `done` holds, or fails past [`BOUND`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::task::yield_now().await;
    }
}

/// From a spinner waiting for its first request: a request, and the spinner looking on.
async fn first_request() -> Instant {
    until("waiting before any request", waiting).await;
    let began = Instant::now();
    work(Instant::now());
    until("spinning after a request", || !waiting()).await;
    began
}

#[test]
fn the_spinner_waits_for_a_request_and_again_once_a_window_passed_without_one() {
    let window = Duration::from_millis(30);
    spinning(window, || async move {
        let began = first_request().await;
        until("waiting once the window passed", waiting).await;
        assert!(
            began.elapsed() >= window,
            "it stopped looking after {:?}, before its window of {window:?}",
            began.elapsed()
        );
        // And it starts again with the next request.
        work(Instant::now());
        until("spinning after the next request", || !waiting()).await;
    });
}

#[test]
fn requests_within_the_window_keep_it_looking() {
    let window = Duration::from_millis(400);
    spinning(window, || async move {
        let began = first_request().await;
        // A request every 50 ms for twice the window: it never waits meanwhile.
        while began.elapsed() < window * 2 {
            let gap = Instant::now();
            while gap.elapsed() < Duration::from_millis(50) {
                assert!(!waiting(), "it waited {:?} after a request", gap.elapsed());
                tokio::task::yield_now().await;
            }
            work(Instant::now());
        }
        until("waiting once the requests stopped", waiting).await;
    });
}

#[test]
fn work_on_a_thread_without_a_spinner_is_only_counted() {
    let before = work_seen();
    work(Instant::now());
    work(Instant::now());
    assert_eq!(work_seen(), before.wrapping_add(2));
    assert!(!waiting());
}

#[test]
fn a_thread_whose_requests_come_further_apart_than_its_window_does_not_spin() {
    let window = Duration::from_millis(20);
    spinning(window, || async move {
        first_request().await;
        until("waiting once the window passed", waiting).await;
        // Requests 100 ms apart, five windows: the average gap between them grows past two
        // windows within a few.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            work(Instant::now());
            until("waiting after a request", waiting).await;
        }
        let spun = spins();
        tokio::time::sleep(Duration::from_millis(100)).await;
        work(Instant::now());
        until("waiting after a request far from the last", waiting).await;
        assert_eq!(
            spins(),
            spun,
            "it spun for a request far from the one before"
        );
        // Requests close together again: it spins again after a few.
        for _ in 0..8 {
            work(Instant::now());
            tokio::task::yield_now().await;
        }
        assert!(spins() > spun, "requests close together again, and no spin");
    });
}
