//! Upstreams under load: a channel's cap on calls at once and on calls a second, and many
//! tasks through two flaky channels, one going down and coming back.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{WAIT, channel_view, config, create_video, openai_channel};
use crate::fake_video::FakeVideo;
use crate::harness::{Relay, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_never_gets_more_calls_at_once_than_its_cap() {
    let fake = FakeVideo::start().await;
    fake.switches.latency_ms.store(20, Ordering::SeqCst);
    let channel = format!("{}max_concurrency = 2\n", openai_channel("up", &fake, 0));
    let relay = Relay::start(&config(&channel)).await;
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(create_video(&relay, &key, &format!("capped {i}")).await);
    }
    // Twelve tasks through two permits take a while on a loaded machine: this checks the cap,
    // not the speed, so the deadline is generous.
    for id in &ids {
        let done = relay.wait_video(id, 3 * WAIT).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    let max = fake.switches.max_active.load(Ordering::SeqCst);
    assert!((1..=2).contains(&max), "{max} calls at once");
    assert!(fake.accepted().values().all(|n| *n == 1));
}

/// `n` tasks through two channels that fail 30% of submissions (and 5% of tasks); the
/// first goes down midway and comes back.
async fn many_tasks_through_two_flaky_channels(n: usize) {
    let a = FakeVideo::start().await;
    let b = FakeVideo::start().await;
    for fake in [&a, &b] {
        fake.switches
            .submit_fail_permille
            .store(300, Ordering::SeqCst);
        fake.switches.task_fail_permille.store(50, Ordering::SeqCst);
        fake.switches.run_ms.store(150, Ordering::SeqCst);
    }
    let channels = format!(
        "{}{}",
        openai_channel("a", &a, 0),
        openai_channel("b", &b, 0)
    );
    let relay = Relay::start(&config(&channels)).await;
    let key = relay.key.clone();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(create_video(&relay, &key, &format!("task number {i}")).await);
        if i == n / 2 {
            a.set(&a.switches.down, true);
        }
    }
    let marked = poll_until(WAIT, || async {
        let v = channel_view(&relay, "a").await;
        (v["marked_unhealthy"].as_u64() >= Some(1)).then_some(v)
    })
    .await;
    assert!(marked.is_some(), "channel a was never marked unhealthy");
    a.set(&a.switches.down, false);

    // Keep looking until every task is final.
    let all_final = all_final(&relay, &ids, Duration::from_secs(60)).await;
    assert!(all_final.is_some(), "not every task ended");

    let (aa, ba) = (a.accepted(), b.accepted());
    for i in 0..n {
        let prompt = format!("task number {i}");
        let times = aa.get(&prompt).copied().unwrap_or(0) + ba.get(&prompt).copied().unwrap_or(0);
        assert!(times <= 1, "{prompt} was submitted {times} times");
    }
    let restored = poll_until(WAIT, || async {
        let v = channel_view(&relay, "a").await;
        (v["healthy"] == true && v["restored"].as_u64() >= Some(1)).then_some(v)
    })
    .await;
    assert!(restored.is_some(), "channel a was not restored");
    let failovers = channel_view(&relay, "a").await["failovers"]
        .as_u64()
        .unwrap_or(0)
        + channel_view(&relay, "b").await["failovers"]
            .as_u64()
            .unwrap_or(0);
    assert!(failovers > 0, "no failover observed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_through_two_flaky_channels_all_end_once_submitted() {
    let n = if std::env::var("RUN_SLOW_TESTS").as_deref() == Ok("1") {
        1000
    } else {
        200
    };
    many_tasks_through_two_flaky_channels(n).await;
}

/// `n` tasks of the relay's own key, the `i`th prompted `"{prompt} {i}"`; their ids.
async fn create_videos(relay: &Relay, n: usize, prompt: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(create_video(relay, &relay.key, &format!("{prompt} {i}")).await);
    }
    ids
}

/// The tasks `ids` once every one of them is final, or none when one is not by `deadline`.
async fn all_final(relay: &Relay, ids: &[String], deadline: Duration) -> Option<Vec<Value>> {
    poll_until(deadline, || async move {
        let mut done = Vec::new();
        for id in ids {
            let v = relay.get(&format!("/v1/videos/{id}")).await.json();
            if !matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return None;
            }
            done.push(v);
        }
        Some(done)
    })
    .await
}

/// The most of `times` in any window of `window` (each window starting at one of them).
fn most_in_a_window(times: &[Instant], window: Duration) -> usize {
    let mut sorted = times.to_vec();
    sorted.sort();
    (0..sorted.len())
        .map(|i| sorted[i..].partition_point(|t| *t < sorted[i] + window))
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_never_gets_more_calls_a_second_than_its_rate() {
    const RATE: usize = 8;
    const TASKS: usize = 10;
    let fake = FakeVideo::start().await;
    // Done at the first poll: each task is a submission, a poll and two downloads.
    fake.switches.run_ms.store(1, Ordering::SeqCst);
    let channel = format!(
        "{}max_calls_per_sec = {RATE}\n",
        openai_channel("up", &fake, 0)
    );
    let relay = Relay::start(&config(&channel)).await;
    let ids = create_videos(&relay, TASKS, "paced").await;
    let all_final = all_final(&relay, &ids, WAIT)
        .await
        .expect("every task ends");
    for v in &all_final {
        assert_eq!(v["status"], "completed", "{v}");
    }
    assert!(fake.accepted().values().all(|n| *n == 1));

    // The upstream's own clock: never more than the rate plus the bucket's burst (the rate
    // rounded up) in any second, though the relay had more to do at once.
    let arrivals = fake.arrivals();
    assert!(arrivals.len() >= TASKS * 4, "{} calls", arrivals.len());
    let most = most_in_a_window(&arrivals, Duration::from_secs(1));
    assert!(most <= RATE + RATE, "{most} calls in one second");
    let view = channel_view(&relay, "up").await;
    assert_eq!(view["max_calls_per_sec"], RATE as f64, "{view}");
    assert!(view["calls_paced"].as_u64() > Some(0), "{view}");
}
