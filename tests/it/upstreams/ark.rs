//! What is particular to `ark` channels: a cancel that becomes the upstream's `DELETE`, and
//! the upstream's callback waking the relay to poll a task at once.

use std::sync::atomic::Ordering;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ark_callback_wakes_the_poll_of_its_task() {
    let fake = FakeVideo::start().await;
    fake.switches.run_ms.store(1_500, Ordering::SeqCst);
    // Polls 30 s apart: without the callback the task could not finish within the wait below.
    let config = format!(
        "[tasks]\npoll_interval_min_ms = 30000\npoll_interval_max_ms = 60000\n{}callback_secret = \"{CALLBACK_SECRET}\"\npriority = 10\n\n{}",
        ark_channel("ark", &fake),
        ark_channel("plain", &fake).replace(
            "\"gen2-pro\" = \"seedance-pro\"",
            "\"gen2-lite\" = \"seedance-lite\""
        ),
    );
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
    assert!(
        done.is_some(),
        "the task did not finish within 10 s of polls 30 s apart"
    );
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
