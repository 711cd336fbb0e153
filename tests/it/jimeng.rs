//! `jimeng` channels against [`FakeJimeng`], which checks every request's signature with its
//! own implementation of Volcengine's scheme: both formats come back playable from the relay's
//! own copy, fetched from the file host without a key, and settle on the frames asked; a first
//! frame goes as `binary_data_base64` to `jimeng_i2v_first_v30`, a first and a last frame to
//! `jimeng_i2v_first_tail_v30`; failed, refused and expired tasks and an expired result link
//! are refunded exactly; a rate limit fails over; a submission that may have reached Jimeng is
//! never sent again; a wrong secret key is refused for its signature and the channel test says
//! `key_refused`; no key shows in any answer or record.

use std::sync::atomic::Ordering;

use http::Method;
use serde_json::{Value, json};

use crate::fake_jimeng::{ACCESS_KEY, FakeJimeng, SECRET_KEY};
use crate::harness::{Body, Relay, png};
use crate::vendor_flows::{
    WAIT, admin_channel_test, asset, completed_and_settled, config, entries_of,
    failed_and_refunded, first_format, library, never_sent_again, playable, second_format, settled,
};

/// The secret key of the channels set up to be refused.
const WRONG: &str = "jimeng-wrong-secret-never-shown-5093";

/// A `jimeng` channel in front of `fake` with `secret`: model_h3 and gen2-pro as `req_key`.
fn channel(name: &str, fake: &FakeJimeng, priority: i32, secret: &str, req_key: &str) -> String {
    format!(
        "[[channels]]\nname = \"{name}\"\nkind = \"jimeng\"\nbase_url = \"{}\"\n\
         access_key = \"{ACCESS_KEY}\"\nsecret_key = \"{secret}\"\npriority = {priority}\n\
         models = [\"model_h3\", \"gen2-pro\"]\n\
         model_map = {{ \"model_h3\" = \"{req_key}\", \"gen2-pro\" = \"{req_key}\" }}\n",
        fake.base
    )
}

fn text_channel(name: &str, fake: &FakeJimeng, priority: i32, secret: &str) -> String {
    channel(name, fake, priority, secret, "jimeng_t2v_v30")
}

/// No secret shows in `text`.
fn assert_no_secret(text: &str) {
    for secret in [ACCESS_KEY, SECRET_KEY, WRONG] {
        assert!(!text.contains(secret), "a key shows: {text}");
    }
}

fn task(prompt: &str) -> Value {
    json!({"model": "model_h3", "prompt": prompt, "seconds": "5", "size": "1280x720"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_formats_come_back_playable_and_settled_on_the_frames_asked() {
    let fake = FakeJimeng::start().await;
    let relay = Relay::start(&config(&text_channel("jimeng", &fake, 0, SECRET_KEY))).await;
    let (key_id, key) = relay.new_key("jimeng", Some(10_000)).await;

    // 5 s of model_h3 at 10 a second; 121 frames are the 5 s asked.
    let (_, done) = completed_and_settled(
        &relay,
        (&key_id, &key),
        task("千军万马 on a grassland at dawn"),
        50,
    )
    .await;
    assert_eq!(
        fake.submissions()[0],
        json!({"req_key": "jimeng_t2v_v30", "prompt": "千军万马 on a grassland at dawn",
               "seed": -1, "frames": 121, "aspect_ratio": "16:9"})
    );
    assert_no_secret(&done.to_string());

    // The second format, 10 s at 9:16 with a seed: 241 frames, 80 (8 a second at 720p).
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "a heron takes off", "duration": 10,
               "resolution": "720p", "ratio": "9:16", "seed": 42}),
    )
    .await;
    let done = relay.wait_generation_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    playable(&relay, &key, done["video_url"].as_str().expect("video_url")).await;
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(80));
    let sent = &fake.submissions()[1];
    assert_eq!(sent["frames"], 241);
    assert_eq!(sent["seed"], 42);
    assert_eq!(sent["aspect_ratio"], "9:16");
    assert_no_secret(&done.to_string());
    assert!(!done.to_string().contains(&fake.files_base), "{done}");

    // Both submitted and polled through the two actions; every call passed the fake's own
    // signature check; the file host never saw a key.
    let actions = fake.actions();
    assert_eq!(
        actions
            .iter()
            .filter(|a| *a == "CVSync2AsyncSubmitTask")
            .count(),
        2
    );
    assert!(actions.iter().any(|a| a == "CVSync2AsyncGetResult"));
    assert_eq!(fake.state.refused_signatures.load(Ordering::SeqCst), 0);
    assert_eq!(fake.state.file_requests.load(Ordering::SeqCst), 2);
    assert_eq!(fake.state.file_requests_with_key.load(Ordering::SeqCst), 0);
    let tasks = relay.admin(Method::GET, "/admin/tasks", Body::Empty).await;
    assert_eq!(tasks.status, 200, "{}", tasks.text());
    assert_no_secret(&tasks.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_frame_and_a_first_and_last_frame_go_inline() {
    let fake = FakeJimeng::start().await;
    let first = channel("first", &fake, 0, SECRET_KEY, "jimeng_i2v_first_v30");
    let relay = Relay::start(&config(&first)).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let (a, b) = (png(8, 8), png(6, 6));
    let a_id = asset(&relay, &key, &lib, "image", &a).await;
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "the cat starts running", "duration": 5,
               "resolution": "720p", "ratio": "adaptive", "seed": 7,
               "assets": [{"id": a_id, "role": "first_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = &fake.submissions()[0];
    assert_eq!(
        *sent,
        json!({"req_key": "jimeng_i2v_first_v30", "prompt": "the cat starts running",
               "seed": 7, "frames": 121,
               "binary_data_base64": [crate::harness::base64(&a)]})
    );
    drop(relay);

    let tail = channel("tail", &fake, 0, SECRET_KEY, "jimeng_i2v_first_tail_v30");
    let relay = Relay::start(&config(&tail)).await;
    let key = relay.key.clone();
    let lib = library(&relay, &key).await;
    let a_id = asset(&relay, &key, &lib, "image", &a).await;
    let b_id = asset(&relay, &key, &lib, "image", &b).await;
    let id = second_format(
        &relay,
        &key,
        json!({"model": "gen2-pro", "prompt": "from one to the other", "duration": 10,
               "resolution": "720p", "ratio": "adaptive",
               "assets": [{"id": a_id, "role": "first_frame"},
                          {"id": b_id, "role": "last_frame"}]}),
    )
    .await;
    let done = relay.wait_generation(&id, WAIT).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let sent = &fake.submissions()[1];
    assert_eq!(sent["req_key"], "jimeng_i2v_first_tail_v30");
    assert_eq!(sent["frames"], 241);
    assert_eq!(
        sent["binary_data_base64"],
        json!([crate::harness::base64(&a), crate::harness::base64(&b)])
    );
    assert!(sent.get("aspect_ratio").is_none(), "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_refused_and_expired_tasks_and_expired_links_are_refunded() {
    let fake = FakeJimeng::start().await;
    let relay = Relay::start(&config(&text_channel("jimeng", &fake, 0, SECRET_KEY))).await;
    let (key_id, key) = relay.new_key("jimeng", Some(10_000)).await;
    for (prompt, code) in [
        ("this one will [fail]", "upstream_error"),
        ("this one will [expire]", "upstream_error"),
        (
            "this one Jimeng will [refuse] after making it",
            "moderation_blocked",
        ),
        ("this one is [blocked] at once", "moderation_blocked"),
    ] {
        let done = failed_and_refunded(&relay, (&key_id, &key), task(prompt), Some(code), 50).await;
        assert_no_secret(&done.to_string());
    }
    // A link that expired before the relay fetched it.
    fake.state.expire_results.store(true, Ordering::SeqCst);
    failed_and_refunded(&relay, (&key_id, &key), task("fetched too late"), None, 50).await;
    let k = relay
        .admin(Method::GET, &format!("/admin/keys/{key_id}"), Body::Empty)
        .await
        .json();
    assert_eq!(k["quota_remaining"], 10_000, "{k}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_or_a_wrong_secret_fails_over_and_the_channel_test_says_which() {
    let (busy, spare) = (FakeJimeng::start().await, FakeJimeng::start().await);
    let channels = format!(
        "{}{}{}",
        text_channel("first", &busy, 10, SECRET_KEY),
        text_channel("wrong-secret", &busy, 5, WRONG),
        text_channel("spare", &spare, 0, SECRET_KEY),
    );
    let relay = Relay::start(&config(&channels)).await;
    let (key_id, key) = relay.new_key("jimeng", Some(10_000)).await;
    busy.fail_next(429, 50429, "Request Has Reached API Limit");
    let id = first_format(&relay, &key, task("failed over")).await;
    let done = relay.wait_video_as(&key, &id, WAIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    // The rate limit and the wrong secret each took nothing; the spare made it.
    assert!(busy.submissions().is_empty());
    assert_eq!(spare.submissions().len(), 1);
    assert_eq!(busy.state.refused_signatures.load(Ordering::SeqCst), 1);
    assert_eq!(entries_of(&relay, &key_id, &id).await, settled(50));
    assert_no_secret(&done.to_string());

    let test = |name| admin_channel_test(&relay, name, assert_no_secret);
    let ok = test("first").await;
    assert_eq!(ok["kind"], "jimeng", "{ok}");
    assert_eq!(ok["status"], "ok", "{ok}");
    assert_eq!(ok["http_status"], 200, "{ok}");
    let refused = test("wrong-secret").await;
    assert_eq!(refused["status"], "key_refused", "{refused}");
    assert_eq!(refused["http_status"], 401, "{refused}");
    assert_eq!(busy.state.refused_signatures.load(Ordering::SeqCst), 2);
    // The channel test generated nothing.
    assert!(busy.submissions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_may_have_reached_jimeng_is_never_sent_again() {
    let (taker, spare) = (FakeJimeng::start().await, FakeJimeng::start().await);
    let channels = (
        text_channel("first", &taker, 10, SECRET_KEY),
        text_channel("second", &spare, 0, SECRET_KEY),
    );
    never_sent_again((&taker, &spare), channels, "jimeng", task, 50).await;
}
