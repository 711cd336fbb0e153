//! Submissions that may have reached an upstream: one the upstream took without answering
//! (it closed the connection, or answered past the first-byte timeout) is never sent again,
//! to that channel or another, whatever the attempts configured; its task fails, is refunded
//! once and is counted in `/metrics`; so is one cut off by a SIGKILL of the relay. One that
//! never left (a refused connection) or that the upstream refused with nothing taken (429,
//! 503) still fails over.

use std::sync::atomic::Ordering;

use http::Method;
use serde_json::{Value, json};

use super::{WAIT, assert_clean, channel_view, config, create_video, openai_channel, quota};
use crate::fake_video::FakeVideo;
use crate::harness::{Body, Http, Relay, Running, poll_until, start_binary};
use crate::vendor_flows::ambiguous_count;

/// The kinds and amounts of the ledger entries of `task`.
fn entries_of(ledger: &[Value], task: &str) -> Vec<(String, i64)> {
    ledger
        .iter()
        .filter(|e| e["task_id"] == task)
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default().to_owned(),
                e["amount"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_taken_without_an_answer_is_never_sent_again() {
    let taker = FakeVideo::start().await;
    let spare = FakeVideo::start().await;
    // Every submission to the first is taken and its connection closed unanswered.
    taker
        .switches
        .close_after_submit
        .store(u32::MAX, Ordering::SeqCst);
    let first = openai_channel("first", &taker, 10)
        .replace("request_timeout_secs = 2", "request_timeout_secs = 1");
    let channels = format!("{first}{}", openai_channel("second", &spare, 0));
    // Many attempts allowed: none may be used on a submission that may have been taken.
    let relay = Relay::start(&config(&format!("submit_attempts = 8\n{channels}"))).await;
    let (key_id, key) = relay.new_key("billed", Some(1000)).await;

    let closed = create_video(&relay, &key, "closed on me").await;
    let done = relay.wait_video_as(&key, &closed, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_eq!(
        done["error"]["message"], "the upstream did not confirm the task",
        "{done}"
    );
    assert_clean(&done.to_string(), &taker);

    // Then one answered only after the first-byte timeout: the same.
    taker.switches.close_after_submit.store(0, Ordering::SeqCst);
    taker.switches.late_ms.store(2_500, Ordering::SeqCst);
    taker.switches.late_permille.store(1000, Ordering::SeqCst);
    let late = create_video(&relay, &key, "answered too late").await;
    let done = relay.wait_video_as(&key, &late, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");

    // Each reached the first channel once, the second never.
    let taken = taker.taken();
    for id in [&closed, &late] {
        let t = taken
            .get(id)
            .unwrap_or_else(|| panic!("{id} not taken: {taken:?}"));
        assert_eq!(t.times, 1, "{id}: {t:?}");
    }
    assert_eq!(taken.len(), 2, "{taken:?}");
    assert!(spare.taken().is_empty() && spare.accepted().is_empty());
    assert_eq!(taker.replays(), 0);

    // Refunded once each: the key has its quota back, each task a pre-deduction and a refund.
    let ledger = relay.ledger(&key_id).await;
    for id in [&closed, &late] {
        let entries = entries_of(&ledger, id);
        assert_eq!(entries.len(), 2, "{id}: {entries:?}");
        assert_eq!(entries[0].0, "prededuct", "{entries:?}");
        assert_eq!(
            entries[1],
            ("refund".to_owned(), -entries[0].1),
            "{entries:?}"
        );
    }
    let k = quota(&relay, &key_id).await;
    assert_eq!(k["quota_remaining"], 1000, "{k}");

    // Counted for the operator, on the channel that may have the task.
    assert_eq!(ambiguous_count(&relay, "first").await, 2.0);
    assert_eq!(ambiguous_count(&relay, "second").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_never_left_or_was_refused_fails_over() {
    // A port nothing listens on: the connection is refused, nothing was sent.
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let busy = FakeVideo::start().await;
    let down = FakeVideo::start().await;
    let good = FakeVideo::start().await;
    busy.switches.burst_429.store(u32::MAX, Ordering::SeqCst);
    down.set(&down.switches.down, true);
    let refused = format!(
        "[[channels]]\nname = \"refused\"\nkind = \"openai-videos\"\nbase_url = \"http://127.0.0.1:{closed_port}\"\napi_key = \"k\"\nmodels = [\"model_h3\"]\npriority = 30\n"
    );
    let channels = format!(
        "{refused}{}{}{}",
        openai_channel("busy", &busy, 20),
        openai_channel("down", &down, 10),
        openai_channel("good", &good, 0)
    );
    let relay = Relay::start(&config(&channels)).await;
    let id = create_video(&relay, &relay.key.clone(), "through them all").await;
    let done = relay.wait_video(&id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(good.taken().get(&id).map(|t| t.times), Some(1));
    // Refused with nothing taken: the 429 and the 503 made no task.
    assert!(busy.taken().is_empty() && down.taken().is_empty());
    for name in ["refused", "busy", "down"] {
        let view = channel_view(&relay, name).await;
        assert!(view["failovers"].as_u64() >= Some(1), "{name}: {view}");
        assert_eq!(ambiguous_count(&relay, name).await, 0.0, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_inside_a_success_is_a_refusal_not_sent_again() {
    let fake = FakeVideo::start().await;
    let spare = FakeVideo::start().await;
    fake.switches
        .error_200_permille
        .store(1000, Ordering::SeqCst);
    let channels = format!(
        "{}{}",
        openai_channel("first", &fake, 10),
        openai_channel("second", &spare, 0)
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("refused", Some(500)).await;
    let id = create_video(&relay, &key, "refused politely").await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert!(fake.taken().is_empty() && spare.taken().is_empty());
    assert_eq!(quota(&relay, &key_id).await["quota_remaining"], 500);
    assert_eq!(ambiguous_count(&relay, "first").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_cut_off_by_a_sigkill_is_never_sent_again() {
    let fake = FakeVideo::start().await;
    // Taken at once, answered only long after the kill.
    fake.switches.late_ms.store(30_000, Ordering::SeqCst);
    fake.switches.late_permille.store(1000, Ordering::SeqCst);
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let config = dir.path().join("relay.toml");
    let channel = openai_channel("up", &fake, 0)
        .replace("request_timeout_secs = 2", "request_timeout_secs = 60");
    std::fs::write(&config, config_text(&channel)).expect("config");
    let first = start_binary(&data, &config).await;
    let key = first_key(&first);
    let http = Http::new();
    let auth = [("authorization", format!("Bearer {key}"))];
    let res = http
        .send(
            Method::POST,
            &format!("{}/v1/videos", first.base),
            Body::Json(json!({"model": "model_h3", "prompt": "cut off", "size": "64x64"})),
            &auth,
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["id"].as_str().expect("id").to_owned();
    let taken = poll_until(WAIT, || async { fake.taken().get(&id).cloned() }).await;
    assert!(taken.is_some(), "the submission never reached the upstream");
    let mut child = first.child;
    child.kill().await.expect("SIGKILL");

    // After the restart the task is found with its submission under way: never sent again.
    fake.switches.late_permille.store(0, Ordering::SeqCst);
    let second = start_binary(&data, &config).await;
    let url = format!("{}/v1/videos/{id}", second.base);
    let done = poll_until(WAIT, || async {
        let v = http
            .send(Method::GET, &url, Body::Empty, &auth)
            .await
            .json();
        (v["status"] == "failed" || v["status"] == "completed").then_some(v)
    })
    .await
    .expect("the task ends after the restart");
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_eq!(fake.taken().get(&id).map(|t| t.times), Some(1));
    let scrape = http
        .send(
            Method::GET,
            &format!("{}/metrics", second.base),
            Body::Empty,
            &[(
                "authorization",
                "Bearer restart-admin-token-5f0c9e2b7a1d4386".to_owned(),
            )],
        )
        .await
        .text();
    let line = "relay_upstream_ambiguous_submissions_total{channel=\"up\"} 1";
    assert!(scrape.contains(line), "{line} not in {scrape}");
}

/// The configuration of a relay binary with the fast polls of [`config`], a short claim
/// lease (a killed relay's claims run out soon) and `channels`.
fn config_text(channels: &str) -> String {
    let tasks = config(&format!("claim_lease_secs = 2\n{channels}"));
    format!("[limits]\npoll_rps_per_task = 1000\n{tasks}")
}

/// The first API key a fresh relay binary printed.
fn first_key(running: &Running) -> String {
    let line = running
        .lines
        .iter()
        .find(|l| l.starts_with("first API key"))
        .unwrap_or_else(|| panic!("no key printed: {:?}", running.lines));
    line.rsplit(' ').next().expect("a key").to_owned()
}
