//! What is particular to `ark` channels: a cancel that becomes the upstream's `DELETE`, and
//! the upstream's callback bringing the relay's poll of a task forward, checked before it does
//! anything and never to sooner than the minimum poll interval, however many come.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::{Value, json};

use super::{WAIT, ark_channel, config};
use crate::fake_video::{FAKE_KEY, FakeVideo};
use crate::harness::{Body, Relay, poll_until};

/// Creates a second-format task with key `key` and waits until the fake has accepted it.
async fn generation(relay: &Relay, key: &str, fake: &FakeVideo, prompt: &str) -> String {
    let res = relay
        .call_as(
            key,
            Method::POST,
            "/v1/video/generations",
            Body::Json(json!({"model": "gen2-pro", "prompt": prompt, "duration": 2,
                "resolution": "480p", "ratio": "16:9"})),
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    let id = res.json()["task_id"].as_str().expect("task_id").to_owned();
    let accepted = poll_until(WAIT, || async {
        fake.accepted().contains_key(prompt).then_some(())
    })
    .await;
    assert!(accepted.is_some(), "the fake never got {prompt:?}");
    id
}

async fn cancel(relay: &Relay, key: &str, id: &str) -> Value {
    let res = relay
        .call_as(
            key,
            Method::POST,
            &format!("/v1/video/generations/{id}/cancel"),
            Body::Empty,
            &[],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text());
    res.json()
}

/// The kinds and amounts of a key's ledger entries for task `id`.
async fn entries_of(relay: &Relay, key_id: &str, id: &str) -> Vec<(String, i64)> {
    relay
        .ledger(key_id)
        .await
        .iter()
        .filter(|e| e["task_id"] == id)
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default().to_owned(),
                e["amount"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

/// The fake's own answer to a `GET` of its task `upstream_id`.
async fn upstream_status(relay: &Relay, fake: &FakeVideo, upstream_id: &str) -> u16 {
    let url = format!(
        "{}/contents/generations/tasks/{upstream_id}",
        fake.ark_base()
    );
    let auth = [("authorization", format!("Bearer {FAKE_KEY}"))];
    relay
        .client
        .send(Method::GET, &url, Body::Empty, &auth)
        .await
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_ark_deletes_the_upstream_task_and_refunds() {
    let fake = FakeVideo::start().await;
    fake.switches.queue_ms.store(60_000, Ordering::SeqCst);
    fake.switches.run_ms.store(120_000, Ordering::SeqCst);
    let relay = Relay::start(&config(&ark_channel("ark", &fake))).await;
    let (key_id, key) = relay.new_key("ark", Some(1000)).await;

    // A queued upstream task: the relay's cancel deletes it, and it is gone.
    let id = generation(&relay, &key, &fake, "queued, then cancelled").await;
    assert_eq!(upstream_status(&relay, &fake, "cgt-1").await, 200);
    let cancelled = cancel(&relay, &key, &id).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let deleted = poll_until(WAIT, || async {
        (!fake.deletes().is_empty()).then(|| fake.deletes())
    })
    .await;
    assert_eq!(deleted, Some(vec![("cgt-1".to_owned(), 200)]));
    assert_eq!(upstream_status(&relay, &fake, "cgt-1").await, 404);
    let task = relay
        .call_as(
            &key,
            Method::GET,
            &format!("/v1/video/generations/{id}"),
            Body::Empty,
            &[],
        )
        .await
        .json();
    assert_eq!(task["status"], "cancelled", "{task}");
    // 2 s of gen2-pro at 480p (5/s): pre-deducted, then refunded in full, once.
    assert_eq!(
        entries_of(&relay, &key_id, &id).await,
        vec![("prededuct".to_owned(), -10), ("refund".to_owned(), 10)]
    );

    // A running upstream task refuses the DELETE (as Ark does); the relay's task is cancelled
    // and refunded all the same, and the upstream task keeps running.
    fake.switches.queue_ms.store(0, Ordering::SeqCst);
    let id = generation(&relay, &key, &fake, "running, then cancelled").await;
    let cancelled = cancel(&relay, &key, &id).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let refused = poll_until(WAIT, || async {
        (fake.deletes().len() == 2).then(|| fake.deletes())
    })
    .await;
    assert_eq!(
        refused.as_deref().and_then(|d| d.get(1)),
        Some(&("cgt-2".to_owned(), 400))
    );
    assert_eq!(upstream_status(&relay, &fake, "cgt-2").await, 200);
    assert_eq!(
        entries_of(&relay, &key_id, &id).await,
        vec![("prededuct".to_owned(), -10), ("refund".to_owned(), 10)]
    );
}

const CALLBACK_SECRET: &str = "callback-secret-for-tests-0123";

/// An `ark` channel taking callbacks (and a plain one that takes none), polls at least
/// `min_ms` apart.
fn callback_config(fake: &FakeVideo, min_ms: u64) -> String {
    format!(
        "[tasks]\npoll_interval_min_ms = {min_ms}\npoll_interval_max_ms = 60000\n{}callback_secret = \"{CALLBACK_SECRET}\"\npriority = 10\n\n{}",
        ark_channel("ark", fake),
        ark_channel("plain", fake).replace(
            "\"gen2-pro\" = \"seedance-pro\"",
            "\"gen2-lite\" = \"seedance-lite\""
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ark_callback_is_checked_before_it_moves_its_task() {
    let fake = FakeVideo::start().await;
    fake.switches.run_ms.store(1_500, Ordering::SeqCst);
    let config = callback_config(&fake, 1_000);
    let relay = Relay::start(&config).await;
    let started = std::time::Instant::now();
    let key = relay.key.clone();
    let id = generation(&relay, &key, &fake, "woken by a callback").await;

    // The upstream was handed the relay's callback URL for this task.
    let sent: Value = serde_json::from_slice(&fake.bodies()[0]).expect("ark body");
    let url = sent["callback_url"].as_str().expect("callback_url");
    let prefix = format!("{}/callbacks/ark/ark?task={id}&token=", relay.base);
    assert!(url.starts_with(&prefix), "{url}");
    let path = url[relay.base.len()..].to_owned();

    let done = poll_until(std::time::Duration::from_secs(10), || async {
        let v = relay
            .get(&format!("/v1/video/generations/{id}"))
            .await
            .json();
        (v["status"] == "succeeded").then_some(v)
    })
    .await;
    assert!(done.is_some(), "the task did not finish within 10 s");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(
        fake.callbacks(),
        vec![("cgt-1".to_owned(), "succeeded".to_owned(), 200)]
    );

    // The callback is checked before anything is done with it.
    let payload = json!({"id": "cgt-1", "status": "succeeded"});
    let post = |path: String, payload: Value| {
        let relay = &relay;
        async move {
            relay
                .send(Method::POST, &path, Body::Json(payload), &[])
                .await
        }
    };
    // A final task: accepted, nothing to do.
    let res = post(path.clone(), payload.clone()).await;
    assert_eq!(res.status, 200, "{}", res.text());
    assert_eq!(res.json()["polled"], false);
    let wrong = path.replace("&token=", "&token=x");
    assert_eq!(post(wrong, payload.clone()).await.status, 401);
    let other_task = path.replace(&format!("task={id}"), "task=gen_other");
    assert_eq!(post(other_task, payload.clone()).await.status, 401);
    let bare = format!("/callbacks/ark/ark?task={id}");
    assert_eq!(post(bare, payload.clone()).await.status, 401);
    let res = post("/callbacks/ark/ark".into(), payload.clone()).await;
    assert_eq!(res.status, 401);
    assert_eq!(res.json()["error"]["message"], "unauthorized");
    // The token of one channel is no good on another, and a channel without a secret or of
    // no such name takes no callbacks.
    let plain = path.replace("/ark/ark?", "/ark/plain?");
    assert_eq!(post(plain, payload.clone()).await.status, 404);
    let nope = path.replace("/ark/ark?", "/ark/nope?");
    assert_eq!(post(nope, payload.clone()).await.status, 404);
    // Another upstream id than the task's: not this task.
    let res = post(path.clone(), json!({"id": "cgt-99", "status": "succeeded"})).await;
    assert_eq!(res.status, 404, "{}", res.text());
    let res = post(path.clone(), json!({"status": "succeeded"})).await;
    assert_eq!(res.status, 400, "{}", res.text());
    let res = relay.send(Method::GET, &path, Body::Empty, &[]).await;
    assert_eq!(res.status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_callbacks_polls_no_faster_than_the_minimum_interval() {
    const MIN: Duration = Duration::from_millis(1_000);
    let fake = FakeVideo::start().await;
    // Runs for the whole test.
    fake.switches.run_ms.store(600_000, Ordering::SeqCst);
    let relay = Relay::start(&callback_config(&fake, MIN.as_millis() as u64)).await;
    let key = relay.key.clone();
    let id = generation(&relay, &key, &fake, "a callback flood").await;
    let sent: Value = serde_json::from_slice(&fake.bodies()[0]).expect("ark body");
    let url = sent["callback_url"].as_str().expect("callback_url");
    let path = url[relay.base.len()..].to_owned();
    let payload = json!({"id": "cgt-1", "status": "running"});

    // 50 genuine callbacks, one every 50 ms: each would have the task polled at once.
    let polls_before = fake.switches.polls.load(Ordering::SeqCst);
    let requests_before = fake.arrivals().len();
    let started = Instant::now();
    let mut pace = tokio::time::interval(Duration::from_millis(50));
    let mut moved = 0;
    for _ in 0..50 {
        pace.tick().await;
        let res = relay
            .send(Method::POST, &path, Body::Json(payload.clone()), &[])
            .await;
        assert_eq!(res.status, 200, "{}", res.text());
        if res.json()["polled"] == true {
            moved += 1;
        }
    }
    let elapsed = started.elapsed();
    let polls = fake.switches.polls.load(Ordering::SeqCst) - polls_before;
    // Any two polls of the task are at least the minimum interval apart.
    let bound = (elapsed.as_millis() / MIN.as_millis()) as u64 + 1;
    assert!(
        polls <= bound,
        "{polls} polls in {elapsed:?} of callbacks; at most {bound} at one per {MIN:?}"
    );
    let arrivals = fake.arrivals();
    let during = &arrivals[requests_before..];
    for pair in during.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= MIN - Duration::from_millis(50),
            "polls {gap:?} apart (minimum {MIN:?})"
        );
    }
    // Callbacks did bring polls forward, each move one store write, no more than the polls.
    assert!(moved >= 1, "no callback brought the poll forward");
    assert!(
        moved <= polls + 1,
        "{moved} callbacks moved the task for {polls} polls"
    );
    let task = relay
        .get(&format!("/v1/video/generations/{id}"))
        .await
        .json();
    assert_eq!(task["status"], "running", "{task}");
}
