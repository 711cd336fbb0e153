//! Upstreams that fail: failover and 429s, cancels, downloads answered 503 or cut short,
//! unknown statuses, hanging polls, and a restart after a task was accepted.

use std::sync::atomic::Ordering;

use http::Method;

use super::{WAIT, assert_clean, channel_view, config, create_video, openai_channel, quota};
use crate::fake_video::{FakeVideo, fake_mp4};
use crate::harness::{Body, Relay, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_channel_fails_over_and_429s_wait() {
    let down = FakeVideo::start().await;
    let busy = FakeVideo::start().await;
    down.set(&down.switches.down, true);
    busy.switches.burst_429.store(3, Ordering::SeqCst);
    let channels = format!(
        "{}{}",
        openai_channel("first", &down, 10),
        openai_channel("second", &busy, 0)
    );
    let relay = Relay::start(&config(&channels)).await;
    let id = create_video(&relay, &relay.key.clone(), "failover please").await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(down.accepted().is_empty());
    assert_eq!(busy.accepted().get("failover please"), Some(&1));
    assert_eq!(busy.switches.burst_429.load(Ordering::SeqCst), 0);
    let first = channel_view(&relay, "first").await;
    assert!(first["failovers"].as_u64().unwrap() >= 1, "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_upstream() {
    let fake = FakeVideo::start().await;
    fake.switches.run_ms.store(60_000, Ordering::SeqCst);
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let id = create_video(&relay, &relay.key.clone(), "stop me").await;
    let running = poll_until(WAIT, || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "in_progress").then_some(v)
    })
    .await;
    assert!(running.is_some(), "the task never ran");
    let res = relay
        .call(
            Method::POST,
            &format!("/v1/videos/{id}/cancel"),
            Body::Empty,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let deleted = poll_until(WAIT, || async { (fake.cancelled() == 1).then_some(()) }).await;
    assert!(deleted.is_some(), "the upstream task was not cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_answered_503_is_tried_again() {
    let fake = FakeVideo::start().await;
    fake.switches.downloads_503.store(2, Ordering::SeqCst);
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let id = create_video(&relay, &relay.key.clone(), "second time lucky").await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(fake.switches.downloads_503.load(Ordering::SeqCst), 0);
    assert_eq!(fake.accepted().get("second time lucky"), Some(&1));
    let content = relay.get(&format!("/v1/videos/{id}/content")).await;
    assert_eq!(content.body.as_ref(), fake_mp4().as_slice());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_statuses_then_truncated_downloads_fail_and_refund() {
    let fake = FakeVideo::start().await;
    let relay = Relay::start(&config(&openai_channel("up", &fake, 0))).await;
    let (key_id, key) = relay.new_key("billed", Some(1000)).await;

    let switches = &fake.switches;
    for (switch, prompt) in [
        (&switches.unknown_status, "never known"),
        (&switches.truncate, "cut short"),
        (&switches.expire_results, "gone too soon"),
    ] {
        fake.set(switch, true);
        let id = create_video(&relay, &key, prompt).await;
        let done = relay.wait_video_as(&key, &id, WAIT).await;
        assert_eq!(done["status"], "failed", "{prompt}: {done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{prompt}");
        assert_clean(&done.to_string(), &fake);
        fake.set(switch, false);
    }

    let k = quota(&relay, &key_id).await;
    assert_eq!(k["quota_remaining"], 1000, "{k}");
    assert_eq!(k["quota_used"], 0, "{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_poll_times_out_and_the_task_goes_on() {
    let fake = FakeVideo::start().await;
    fake.set(&fake.switches.hang_polls, true);
    let channel = openai_channel("up", &fake, 0)
        .replace("request_timeout_secs = 2", "request_timeout_secs = 1");
    let relay = Relay::start(&config(&channel)).await;
    let id = create_video(&relay, &relay.key.clone(), "wait for me").await;
    let timed_out = poll_until(WAIT, || async {
        let v = channel_view(&relay, "up").await;
        (v["failures"].as_u64() >= Some(1)).then_some(v)
    })
    .await;
    assert!(timed_out.is_some(), "no poll timed out");
    fake.set(&fake.switches.hang_polls, false);
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_task_survives_a_restart_without_a_second_submission() {
    let fake = FakeVideo::start().await;
    fake.switches.run_ms.store(1_500, Ordering::SeqCst);
    let channel = config(&openai_channel("up", &fake, 0));
    let relay = Relay::start(&channel).await;
    let key = relay.key.clone();
    let id = create_video(&relay, &key, "across a restart").await;
    let running = poll_until(WAIT, || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "in_progress").then_some(v)
    })
    .await;
    assert!(running.is_some(), "the task never ran");
    let dir = relay.stop().await;
    let relay = Relay::start_in(dir, Some(key), &channel).await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(fake.accepted().get("across a restart"), Some(&1));
}
