//! `kling` channels against [`FakeKling`]: both formats come back playable from the relay's
//! own copy, frames and reference images reach the right task kind in the vendor's form,
//! failures, refusals and expired result URLs are refunded exactly, a rate limit or a refused
//! key fails over to another channel, a submission that may have reached Kling is never sent
//! again, Kling's callback brings its task's poll forward (a forged one changes nothing), and
//! the channel test reads the account.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;

use serde_json::json;

use crate::fake_kling::{ACCESS_KEY, FakeKling, SECRET_KEY};
use crate::harness::{Body, Relay, png, poll_until};
use crate::vendor_flows::{
    WAIT, assert_channel_tests, asset, callback_config, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, poll_schedule,
    second_format, settled,
};

/// A `kling` channel in front of `fake`, serving both formats' models with kling-v2-6 and
/// gen2-lite with the multi-image model.
fn channel(name: &str, fake: &FakeKling, priority: i32, secret: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"kling\"\nbase_url = \"{}\"\n\
         access_key = \"{ACCESS_KEY}\"\nsecret_key = \"{secret}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\", \"gen2-lite\"]\n\
         model_map = {{ \"model_h3\" = \"kling-v2-6\", \"gen2-pro\" = \"kling-v2-6\", \"gen2-lite\" = \"kling-v1-6\" }}\n",
        fake.base
    )
}

async fn relay_with(fake: &FakeKling) -> Relay {
    Relay::start(&config(&channel("kling", fake, 0, SECRET_KEY))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled() {
    let fake = FakeKling::start().await;
    let relay = relay_with(&fake).await;
    let (key_id, key) = relay.new_key("kling", Some(10_000)).await;

    // The OpenAI SDK's body, unchanged.
    // 5 s of model_h3 at 10 a second, settled on the 5 s Kling reported.
    let (id, _) = completed_and_settled(
        &relay,
        (&key_id, &key),
        json!({"model": "model_h3", "prompt": "a rabbit reads the paper", "seconds": "5",
               "size": "1280x720"}),
        50,
    )
    .await;

    let (kind, sent) = &fake.submissions()[0];
    assert_eq!(kind, "text2video");
    assert_eq!(
        *sent,
        json!({"model_name": "kling-v2-6", "prompt": "a rabbit reads the paper",
               "duration": "5", "mode": "std", "aspect_ratio": "16:9",
               "external_task_id": id})
    );

    // The second format at 1080p is Kling's pro mode.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 10,
               "resolution": "1080p", "ratio": "9:16"}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let url = done["video_url"].as_str().expect("video_url");
    playable(&relay, &key, url).await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(120));
    let (kind, sent) = &fake.submissions()[1];
    assert_eq!(kind, "text2video");
    assert_eq!(sent["duration"], "10");
    assert_eq!(sent["mode"], "pro");
    assert_eq!(sent["aspect_ratio"], "9:16");
    // Every call carried a good token; none reached the client.
    assert!(fake.state.refused_tokens.lock().unwrap().is_empty());
    assert!(!done.to_string().contains(&fake.base));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_and_reference_images_reach_their_task_kind() {
    let fake = FakeKling::start().await;
    let relay = relay_with(&fake).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (first, last) = (png(8, 8), png(6, 6));
    let first_id = asset(&relay, &key, &lib, "image", &first).await;
    let last_id = asset(&relay, &key, &lib, "image", &last).await;

    // A first frame: image to video, the image as raw base64, no ratio.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "from this frame", "duration": 5,
               "resolution": "720p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let b64 = crate::harness::base64(&first);
    let (kind, sent) = fake.submissions()[0].clone();
    assert_eq!(kind, "image2video");
    assert_eq!(sent["image"], b64.as_str());
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
    assert!(sent.get("image_tail").is_none(), "{sent}");
    // The poll went to the path of the task's kind.
    assert!(
        fake.state
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|p| p.starts_with("/v1/videos/image2video/8"))
    );

    // First and last frames: `image_tail`.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "from one frame to the other", "duration": 5,
               "resolution": "1080p", "ratio": "adaptive",
               "assets": [{"id": first_id, "role": "first_frame"},
                          {"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (kind, sent) = fake.submissions()[1].clone();
    assert_eq!(kind, "image2video");
    assert_eq!(sent["image"], b64.as_str());
    assert_eq!(sent["image_tail"], crate::harness::base64(&last).as_str());
    assert_eq!(sent["mode"], "pro");

    // A last frame alone: `image_tail` without `image`, as Kling allows.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "ending on this frame", "duration": 5,
               "resolution": "1080p", "ratio": "adaptive",
               "assets": [{"id": last_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (kind, sent) = fake.submissions().last().cloned().expect("a submission");
    assert_eq!(kind, "image2video");
    assert!(sent.get("image").is_none(), "{sent}");
    assert_eq!(sent["image_tail"], crate::harness::base64(&last).as_str());

    // Reference images: the multi-image kind's `image_list`.
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-lite", "prompt": "these two, together", "duration": 5,
               "resolution": "720p", "ratio": "16:9",
               "assets": [{"id": first_id, "role": "reference_image"},
                          {"id": last_id, "role": "reference_image"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let (kind, sent) = fake.submissions()[3].clone();
    assert_eq!(kind, "multi-image2video");
    assert_eq!(sent["model_name"], "kling-v1-6");
    assert_eq!(
        sent["image_list"],
        json!([{"image": b64}, {"image": crate::harness::base64(&last)}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_refusals_and_expired_results_are_refunded() {
    let fake = FakeKling::start().await;
    let relay = relay_with(&fake).await;
    let (key_id, key) = relay.new_key("kling", Some(10_000)).await;
    let task = |prompt: &str| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"});

    // The vendor fails the task.
    failed_and_refunded(
        &relay,
        (&key_id, &key),
        task("this one [fail]s"),
        Some("upstream_error"),
        50,
    )
    .await;

    // Its risk control refuses the video: a content refusal, refunded.
    failed_and_refunded(
        &relay,
        (&key_id, &key),
        task("this one is [refuse]d"),
        Some("moderation_blocked"),
        50,
    )
    .await;

    // It refuses the prompt at submission (code 1301): the same, and no other try.
    failed_and_refunded(
        &relay,
        (&key_id, &key),
        task("this one is [blocked]"),
        Some("moderation_blocked"),
        50,
    )
    .await;

    // The result URL has expired by the time the relay fetches it.
    fake.state.expire_results.store(true, Ordering::SeqCst);
    let done =
        failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 50).await;
    // Nothing of the vendor reached the client.
    assert!(!done.to_string().contains("risk control"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_or_a_refused_key_fails_over_to_another_channel() {
    let (busy, spare) = (FakeKling::start().await, FakeKling::start().await);
    // The preferred channel signs with a wrong secret; the spare with the right one.
    let channels = format!(
        "{}{}{}",
        channel("first", &busy, 10, SECRET_KEY),
        channel("wrong-key", &busy, 5, "not-the-secret-key"),
        channel("spare", &spare, 0, SECRET_KEY),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("kling", Some(10_000)).await;

    // 429 with code 1302 (too many requests) on the first: the next channel, whose token is
    // refused (401, 1000), then the spare.
    busy.fail_next(429, 1302);
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "failed over", "seconds": "5", "size": "1280x720"}),
    )
    .await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 1);
    assert_eq!(
        busy.state.refused_tokens.lock().unwrap().as_slice(),
        ["Authorization failed: bad signature"]
    );
    // Charged once, by the channel that made it.
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));

    // The channel test tells the operator which key works.
    assert_channel_tests(
        &relay,
        &[("first", "ok"), ("wrong-key", "key_refused")],
        &[],
    )
    .await;
    assert!(
        busy.state
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|p| p == "/account/costs")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_kling_is_never_sent_again() {
    let (taker, spare) = (FakeKling::start().await, FakeKling::start().await);
    let channels = (
        channel("first", &taker, 10, SECRET_KEY),
        channel("second", &spare, 0, SECRET_KEY),
    );
    never_sent_again(
        (&taker, &spare),
        channels,
        "kling",
        |prompt| json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"}),
        50,
    )
    .await;
}

const CALLBACK_SECRET: &str = "kling-callback-secret-for-tests-42";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kling_callback_brings_the_poll_forward_and_a_forged_one_changes_nothing() {
    let fake = FakeKling::start().await;
    // The task runs until the test ends it.
    fake.state.run_ms.store(600_000, Ordering::SeqCst);
    let with_secret = format!(
        "{}callback_secret = \"{CALLBACK_SECRET}\"\n",
        channel("kling", &fake, 0, SECRET_KEY)
    );
    let relay = Relay::start(&callback_config(50, &with_secret)).await;
    let key = relay.key.clone();
    let id = first_format(
        &relay,
        &key,
        json!({"model": "model_h3", "prompt": "woken by Kling", "seconds": "5", "size": "1280x720"}),
    )
    .await;

    // Kling was handed the relay's callback URL for this task.
    let sent = poll_until(WAIT, || async { fake.submissions().first().cloned() })
        .await
        .expect("the submission");
    let url = sent.1["callback_url"].as_str().expect("callback_url");
    let prefix = format!("{}/callbacks/kling/kling?task={id}&token=", relay.base);
    assert!(url.starts_with(&prefix), "{url}");
    let path = url[relay.base.len()..].to_owned();

    // Once the task is 1.8 s old, its next regular poll is at least 0.9 s away.
    let old = Duration::from_millis(1_800);
    let last = poll_until(WAIT, || async {
        fake.query_ages(&id)
            .last()
            .copied()
            .filter(|age| *age >= old)
    })
    .await
    .expect("polled when 1.8 s old");
    fake.finish(&id);

    // Callbacks that are not Kling's are refused and write nothing.
    let before = poll_schedule(&relay, &id).await;
    let payload = json!({"task_id": "whatever", "task_status": "succeed"});
    let post = |path: String| {
        let (relay, payload) = (&relay, payload.clone());
        async move {
            relay
                .send(Method::POST, &path, Body::Json(payload), &[])
                .await
        }
    };
    let forged = path.replace("&token=", "&token=0");
    assert_eq!(post(forged).await.status, 401);
    let other_task = path.replace(&format!("task={id}"), "task=video_other");
    assert_eq!(post(other_task).await.status, 401);
    let bare = format!("/callbacks/kling/kling?task={id}");
    assert_eq!(post(bare).await.status, 401);
    let other_channel = path.replace("/kling/kling?", "/kling/nope?");
    assert_eq!(post(other_channel).await.status, 404);
    // The right token with another upstream task: not this task.
    let res = post(path.clone()).await;
    assert_eq!(res.status, 404, "{}", res.text());
    assert_eq!(poll_schedule(&relay, &id).await, before);
    let res = relay.send(Method::GET, &path, Body::Empty, &[]).await;
    assert_eq!(res.status, 405);

    // Kling's own callback brings the poll forward: the task completes well before its next
    // regular poll would have come.
    fake.call_back(&id);
    let done = poll_until(Duration::from_millis(700), || async {
        let v = relay.get(&format!("/v1/videos/{id}")).await.json();
        (v["status"] == "completed").then_some(v)
    })
    .await;
    assert!(done.is_some(), "the callback did not move the task on");
    let calls = fake.state.callbacks.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .any(|(_, status, answered)| status == "succeed" && *answered == 200),
        "{calls:?}"
    );
    let ages = fake.query_ages(&id);
    let next = ages.iter().find(|age| **age > last).expect("a poll after");
    // The schedule had it at half the task's age after the poll before.
    assert!(
        *next - last < last / 3,
        "polled at {next:?} of age, after {last:?}: not brought forward"
    );
}
